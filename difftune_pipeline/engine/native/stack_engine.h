// The extended model's stack engine: push, pop, call and ret update RSP in the
// front end, so they neither wait for nor feed a dependency chain through RSP;
// an instruction that then names RSP itself needs a sync µop first (Agner Fog,
// "The microarchitecture of Intel, AMD and VIA CPUs", "Stack engine").
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Drops the RSP reads and writes of B's stack operations from their lowered
// instructions; returns which instructions need a sync µop before them (an
// explicit use of RSP with a stack operation since the previous one, around the loop).
std::vector<bool> applyStackEngine(const EngineImpl &E, const BlockImpl &B,
                                   llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered);

}  // namespace dt

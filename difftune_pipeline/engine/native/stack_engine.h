// The extended model's stack engine: push, pop, call and ret update RSP in the
// front end, so they neither wait for nor feed a dependency chain through RSP;
// an instruction that then names RSP itself needs a sync µop first (Agner Fog,
// "The microarchitecture of Intel, AMD and VIA CPUs", "Stack engine").
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Whether MI is a stack operation, whose RSP update the stack engine does: an implicit use
// and def of RSP (push, pop and their flag forms; LLVM gives call and ret no RSP def).
bool isStackOp(const EngineImpl &E, const llvm::MCInst &MI);

// Drops the RSP reads and writes of B's stack operations from their lowered
// instructions; returns which instructions need a sync µop before them (an
// explicit use of RSP with a stack operation since the previous one, around the
// loop). The sync µops (one cycle each) sit in the RSP chain: an instruction that
// needs them and writes RSP itself writes it SyncUops cycles later. The longer
// writes' descriptors are kept in Owned, which must outlive the simulation.
std::vector<bool> applyStackEngine(const EngineImpl &E, const BlockImpl &B,
                                   llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                                   unsigned SyncUops,
                                   std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned);

}  // namespace dt

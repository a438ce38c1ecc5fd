// The extended model's stack engine: push, pop, call and ret update RSP in the
// front end, so they feed no dependency chain through RSP: their addresses are
// the RSP the last explicit write left plus the engine's offset, so they wait for
// that write and for no stack operation. An instruction that then names RSP
// itself needs a sync µop first (Agner Fog, "The microarchitecture of Intel, AMD
// and VIA CPUs", "Stack engine").
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Whether MI is a stack operation, whose RSP update the stack engine does: an implicit use
// and def of RSP (push, pop and their flag forms; LLVM gives call and ret no RSP def).
bool isStackOp(const EngineImpl &E, const llvm::MCInst &MI);

// Drops the RSP writes of B's stack operations from their lowered
// instructions; returns the sync µops (the table's stack_sync_uops) each
// instruction needs before it: an explicit use of RSP with a stack operation
// since the previous one, around the loop. The sync µops (one cycle each) sit in
// the RSP chain: an instruction that needs them and writes RSP itself writes it
// that many cycles later. The longer writes' descriptors are kept in Owned,
// which must outlive the simulation.
std::vector<unsigned> applyStackEngine(const EngineImpl &E, const BlockImpl &B,
                                       llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                                       const Globals &G,
                                       std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned);

}  // namespace dt

// The extended model's fast pointer chasing (mechanism pointer_chasing, Intel
// Sandy Bridge to Skylake): a load whose address is a base register plus a
// displacement of 0 to 2047, with no index and no segment, whose base was last
// written by a plain load of a pointer (mov r64/r32 from memory, movslq, pop),
// takes the short path of the load pipeline and delivers its data sooner (Intel's
// optimization manual: the 4-cycle load-to-use latency of simple addressing;
// Abel and Reineke's uiCA, ICS 2022, which measured the rule). llvm-mca gives
// every load its one latency: BHive measures the chain `movq (%rax), %rax` at
// 4.0 cycles an iteration on Haswell, where LLVM's table says 5.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Which of B's instructions load through a pointer chase (the base's last
// writer found in block order, around the loop).
std::vector<bool> pointerChases(const EngineImpl &E, const BlockImpl &B);

// Shortens every register write of each such instruction of Lowered by the
// table's pointer_chase_saving cycles (not below 0). The new descriptors are
// kept in Owned, which must outlive the simulation.
void shortenPointerChases(const EngineImpl &E, const BlockImpl &B,
                          llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered, const Globals &G,
                          std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned);

}  // namespace dt

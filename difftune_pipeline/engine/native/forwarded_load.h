// The extended model's forwarded loads (mechanism forwarded_load, Intel): a
// plain load (one register written, nothing read but its address) that reads
// its bytes from an older store of the block still in the store buffer gets
// them from the store, not the L1: its result is ready forwarded_load_latency
// cycles after it issues (it issues once the store's data is ready, memory_unit.h),
// whatever its row says. LLVM gives a load one latency, which serves a load
// from the L1 (BHive measures the 32-bit chain `movl 112(%rdi), %edi` at 4.0
// cycles an iteration on Haswell: the pointer-chase's 4) and a forwarded one
// alike (`movl 4(%r14), %eax ; incl %eax ; movl %eax, 4(%r14)`: 6.0, a load of 4
// after the store's data, the increment, the store), so a tuner can fit only one of them.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Which of B's instructions are plain loads that read all their bytes from one
// access of the youngest older store that writes them, at the addresses B's
// memory map records for its second iteration (the first when only one is
// recorded), looking back one iteration around the loop.
std::vector<bool> forwardedLoads(const EngineImpl &E, const BlockImpl &B);

// Sets every register write of each such instruction of Lowered (as B's memory
// map recorded them when its addresses were attached) to the table's
// forwarded_load_latency cycles. The new descriptors are kept in Owned,
// which must outlive the simulation.
void timeForwardedLoads(const BlockImpl &B,
                        llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered, const Globals &G,
                        std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned);

}  // namespace dt

// The extended model's first-level DTLB misses (mechanism dtlb_miss, Intel): a
// load whose 4 KiB page is, in every iteration of the steady state, one that the
// 64-entry first-level DTLB no longer holds misses it and takes its translation
// from the second-level TLB: its result comes dtlb_miss_latency cycles later
// than its row says. BHive's harness backs every page with one physical page,
// but a block that adds a loaded value to a pointer (a jump table's
// `movslq (%rax,%rsi,4), %rdx ; addq %rdx, %rax`) lands on a new virtual page
// every iteration, and BHive measures those chains at 14.0 cycles an iteration
// on Haswell and 15.0 on Skylake, where the load and the add take 6.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Which of B's instructions load through an address derived from a value the
// block loads, keep one stride over B's recorded iterations, and load from a
// page that misses a 64-entry DTLB (least recently used first out) in each of
// four iterations of the steady state (B's addresses continued at their
// strides); none without real addresses. A stream a register steps by a
// constant is not charged: BHive measures those at a smaller, varying cost
// (memory_unit.h), as the miss overlaps the work around it.
std::vector<bool> dtlbMisses(const EngineImpl &E, const BlockImpl &B);

// Adds the table's dtlb_miss_latency to every register write of each such
// instruction of Lowered (as B's memory map recorded them when its addresses were attached). The new descriptors are kept in Owned, which must
// outlive the simulation.
void timeDtlbMisses(const BlockImpl &B, llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                    const Globals &G, std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned);

}  // namespace dt

// The extended model's destination reads (mechanism output_dependency, Intel):
// a bit scan (BSF, BSR) leaves its destination as it was when the source is
// zero, so it reads it, and on some generations POPCNT, LZCNT and TZCNT wait for
// their destination's last writer too, a false dependency (on Sandy and Ivy
// Bridge, which lack LZCNT and TZCNT, their encodings run as BSR and BSF).
// LLVM's tables give these instructions no such read: BHive measures
// `bsrq %rsi, %rax ; addq %rdi, %rax` at 4.0 cycles an iteration on Skylake
// (llvm-mca: 1.0), the bit scan's 3 and the add's 1 around the loop. A bit test
// (BT, BTS, BTR, BTC) keeps the zero flag as it was, so it reads the flags: BHive
// measures a lone `btl $28, %edx` at 0.98 cycles an iteration on Haswell (llvm-mca: 0.49).
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// Adds to each instruction of Lowered that is a register form of an opcode the
// generation's reads_destination names a read of the register it writes, and to
// one of an opcode its reads_flags names a read of the flags; returns how many it
// changed. The reads' descriptors are kept in Owned, which must
// outlive the simulation.
unsigned readDestinations(const EngineImpl &E, const BlockImpl &B,
                          llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                          std::vector<std::unique_ptr<llvm::mca::ReadDescriptor>> &Owned);

}  // namespace dt

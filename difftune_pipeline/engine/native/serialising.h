// Instructions that the extended model's front end holds until every older
// instruction has retired, and then for a number of cycles more.
//
// Zen+'s zero-count shift (mechanism zero_shift): a shift or rotate whose count
// is zero leaves the flags as they were, and an instruction that then reads those
// flags waits for a microcode assist. Measured with nanoBench on Zen+ (AnICA's
// artifact): `shll $0, %r8d ; cmovgel %edx, %ecx` takes 26 cycles an iteration,
// `shll $0, %r8d` alone 1, and 669 of the 684 blocks of that set slower than 15
// cycles an iteration are such a pair.
//
// Locked instructions on Intel's cores (mechanism locked): a lock-prefixed
// read-modify-write, and xchg with memory (locked whatever its prefixes), drain
// the store buffer and execute alone (Intel's optimization manual, "locked
// instructions"; BHive measures a lone `lock decl (%rbx)` at 19 cycles an
// iteration on Haswell).
//
// The x87 stack out of balance on Intel's cores (mechanism x87_stack): an x87
// instruction that reads an empty register (underflow) or pushes onto a full
// one (overflow) raises a stack fault; masked, as the harness leaves it, its
// response is a microcode assist. BHive's harness starts with the stack empty and
// runs the block over and over, so a block that pushes more than it pops fills
// the eight registers within eight iterations and overflows from then on, and
// one that pops more, or reads a register it never loaded, underflows. BHive
// measures `fldz ; testq %rdi, %rdi` at 330 cycles an iteration on Ivy Bridge,
// `fstpt (%rbp) ; addq 24(%rsp), %rbp ; cmpq %r12, %rbx` at 356 on Haswell, and
// the balanced `fldt 16(%rbx) ; ... ; fstpt (%r12) ; ...` at 6.9 on Skylake.
#pragma once

#include "engine_impl.h"

namespace dt {

// Which of B's instructions read flags that a zero-count shift or rotate wrote
// last (in this iteration or, around the loop, the one before). A count is zero
// when its immediate is (modulo the operand width's count mask), or when it is CL
// and `ClZero`: the harness model starts RCX at a multiple of 256 and no
// instruction of B writes RCX. A zero-count RCL or RCR reads the carry with no
// assist itself (AnICA: `rcll $0, %r12d ; movq 128(%rsi), %xmm6` takes 4 cycles
// an iteration, `rclb $0, %dl ; cmovgel %r11d, %r10d` 35).
std::vector<bool> zeroShiftAssists(const EngineImpl &E, const BlockImpl &B, bool ClZero);

// Which of B's instructions are locked: a lock prefix among its own legacy
// prefixes, or a LOCK_PREFIX instruction just before it (as LLVM disassembles
// one), or an xchg with a memory operand.
std::vector<bool> lockedInstructions(const EngineImpl &E, const BlockImpl &B);
// Which of B's instructions fault on the x87 stack once the stack has settled:
// the stack followed register by register (TOP and each register's tag) from
// empty over X87_ITERATIONS iterations of the block (more than twice the eight
// registers: any imbalance has filled or emptied them), the last one's faults. An
// MMX instruction leaves every register valid; fninit, emms and state loads
// leave them empty.
constexpr int X87_ITERATIONS = 17;
std::vector<bool> x87StackFaults(const EngineImpl &E, const BlockImpl &B);
// Per instruction, the cycles it waits once every older instruction has retired
// under the serialising mechanisms that are on (zero_shift, locked, x87_stack), summed; -1
// where it does not wait.
std::vector<int> serialisingDrains(const EngineImpl &E, const BlockImpl &B, const Globals &G);

}  // namespace dt

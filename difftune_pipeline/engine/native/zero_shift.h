// The extended model's zero-count shift on AMD Zen+: a shift or rotate whose
// count is zero leaves the flags as they were, and an instruction that then reads
// those flags waits for a microcode assist. Measured with nanoBench on Zen+
// (AnICA's artifact): `shll $0, %r8d ; cmovgel %edx, %ecx` takes 26 cycles an
// iteration, `shll $0, %r8d` alone 1, and 669 of the 684 blocks of that set
// slower than 15 cycles an iteration are such a pair.
#pragma once

#include "engine_impl.h"

namespace dt {

// Which of B's instructions read flags that a zero-count shift or rotate wrote
// last (in this iteration or, around the loop, the one before). A count is zero
// when its immediate is (modulo the operand width's count mask), or when it is CL
// and `ClZero`: the harness model starts RCX at a multiple of 256 and no
// instruction of B writes RCX. RCL and RCR read the carry themselves: not counted.
std::vector<bool> zeroShiftAssists(const EngineImpl &E, const BlockImpl &B, bool ClZero);

}  // namespace dt

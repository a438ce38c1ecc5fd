// The extended model's folded loads (mechanism folded_load, Intel): an
// instruction that loads one of its operands (`addl 192(%r14), %ecx`) is a load
// µop and an operation µop. LLVM times it as one instruction whose latency counts
// both, and lets its register operands be read later by a read advance; but MCA
// marks such a read ready only once the operand's producer has issued, so a chain
// through the register operand still pays the load's cycles: BHive measures
// `andl $2147483647, %ecx ; addl 192(%r14), %ecx` at 2.0 cycles an iteration on
// Skylake, where llvm-mca says 6. Here the load's cycles (the largest read
// advance of the opcode's row, R) leave the instruction's latency and its read
// advances, and the load unit holds the instruction until R cycles after its
// address registers are ready and any store it reads from has forwarded
// (memory_unit.h): the operation then starts when both its operands are there.
#pragma once

#include "engine_impl.h"

#include <functional>

namespace dt {

// Whether an opcode can be a folded load: it loads and stores nothing.
bool foldsLoad(const llvm::MCInstrDesc &D);

// The row of a folded load as the mechanism compiles it: when the row reads an
// operand R > 0 cycles late, each latency less R (not below 0) and each read
// advance less R, and Cycles is set to R; otherwise the row, and Cycles 0.
Row foldedRow(const Row &R, unsigned &Cycles);

// Folds, in T's tables, every class of LLVM's whose opcodes are all folded loads
// (Row is how a class reads as a row), for the instructions that have no row of their own.
void foldClasses(const EngineImpl &E, TableImpl &T, const std::function<Row(unsigned)> &RowOf);

// What the load unit needs of one instruction of a block under the mechanism.
struct FoldedLoad {
  unsigned Cycles = 0;                // R, 0 when not a folded load
  std::vector<unsigned> AddressOps;  // the MCInst operands its address registers are
};
std::vector<FoldedLoad> foldedLoads(const EngineImpl &E, const TableImpl &T, const BlockImpl &B);

}  // namespace dt

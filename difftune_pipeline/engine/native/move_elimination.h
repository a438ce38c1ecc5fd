// The extended model's move elimination: register-to-register moves renamed
// away (no µop executes them, no latency), at most a learnable number a cycle.
// LLVM's Sandy Bridge to Skylake models declare none of it (Ivy Bridge on have it:
// Intel's optimization manual, "eliminating register moves").
//
// MCA's own elimination (RegisterFile::tryEliminateMoveOrSwap) is not used: it
// aliases the destination to the source *register*, so once the source is written
// again a read of the destination waits for that new writer instead of the value
// the move copied (`movl $1, %eax ; cmovneq %rsi, %rax ; movq %rax, %rsi`: the
// chain through RSI vanished, 1.0 cycles an iteration where BHive measures 2.0).
// A renamed-away move here is an instruction of its own descriptor: no latency,
// no port, no scheduler entry; its µop still issues and retires. MCA issues such
// an instruction the cycle its source is ready and its readers in that same
// cycle, so the destination carries exactly the value the move copied.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// The table's register file: general-purpose and vector registers renamed as
// whole registers (MCA eliminates no move itself).
void describeRenamedRegisters(const EngineImpl &E, TableImpl &T);

// What the renamed-away forms of a block's moves point to; outlives the simulation.
struct RenamedMoves {
  std::vector<std::unique_ptr<llvm::mca::InstrDesc>> Descs;
  std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> Writes;
  std::vector<std::unique_ptr<llvm::mca::Instruction>> Executed;  // each move as it executes
};

// Replaces each of B's register-to-register moves (between different registers)
// by its renamed-away form; returns, per instruction, the form it executes in when
// a cycle's renames are spent (null: not a move).
std::vector<const llvm::mca::Instruction *> renameMoves(
    const EngineImpl &E, const BlockImpl &B,
    llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered, RenamedMoves &Owned);

// How many moves a cycle the table renames away.
unsigned renamesPerCycle(const Globals &G);

}  // namespace dt

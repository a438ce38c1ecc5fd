// The extended model's move elimination: register-to-register moves renamed
// away (no µop executes them, no latency), at most a learnable number a cycle.
// LLVM's Sandy Bridge to Skylake models declare none of it (Ivy Bridge on have it:
// Intel's optimization manual, "eliminating register moves"). MCA's register file
// already implements the mechanism; the table only describes it.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// The table's register file: general-purpose and vector registers whose moves
// may be eliminated, the table's moves_eliminated a cycle.
void describeMoveElimination(const EngineImpl &E, const Globals &G, TableImpl &T);

// Marks B's register-to-register moves (between different registers) as candidates.
void markEliminableMoves(const EngineImpl &E, const BlockImpl &B,
                         llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered);

}  // namespace dt

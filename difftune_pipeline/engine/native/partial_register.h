// The extended model's partial-register writes (mechanism partial_register,
// Intel): an instruction that writes the low 8 or 16 bits of a general-purpose
// register without reading it merges the result into the full register, so it
// waits for the register's last writer. llvm-mca leaves such a write
// independent: `movb $-12, %bl` alone runs at 0.33 cycles an iteration, where
// BHive measures 0.98 (Ivy Bridge), 0.99 (Haswell) and 0.95-0.98 (Skylake).
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"

namespace dt {

// The 64-bit general-purpose register a write of R merges into, or none (R is
// not a part of one, or is AH to DH, renamed apart).
llvm::MCRegister mergedInto(const EngineImpl &E, llvm::MCRegister R);

// Adds to each such instruction of Lowered that does not load a read of the
// full 64-bit register it partially writes; returns how many it changed. The
// reads' descriptors are kept in Owned, which must outlive the simulation.
unsigned mergePartialWrites(const EngineImpl &E,
                            llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                            std::vector<std::unique_ptr<llvm::mca::ReadDescriptor>> &Owned);

}  // namespace dt

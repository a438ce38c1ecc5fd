// Port maps: the explicit cycles a row gives each processor resource, the
// expanded form LLVM stores, and the rule that keeps a row schedulable.
#pragma once

#include "engine_impl.h"

namespace dt {

// The explicit cycles of a class's resource uses, by undoing LLVM's expansion.
PortUses explicitUses(const EngineImpl &E, const llvm::MCSchedClassDesc &D);

// The stored form of explicit uses; acquire cycles come from `Orig`'s entries.
std::vector<llvm::MCWriteProcResEntry> expandUses(const EngineImpl &E,
                                                  const llvm::MCSchedClassDesc &Orig,
                                                  PortUses Uses);

// Throws InvalidTable when two resources with cycles partially overlap and
// LLVM's own row for `Class` does not already give cycles to both.
void checkNesting(const EngineImpl &E, const std::string &Where, unsigned Class,
                  const PortUses &Uses);

}  // namespace dt

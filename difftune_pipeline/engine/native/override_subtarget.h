// The subtarget of a compiled table (see tables.cpp).
#pragma once

#include "engine_impl.h"
#include "slow_lea.h"

namespace dt {

class OverrideSubtargetInfo final : public llvm::MCSubtargetInfo {
  const EngineImpl &E;
  const std::unordered_map<uint64_t, unsigned> &Private;
  const std::unordered_map<unsigned, unsigned> &SlowLea;

 public:
  OverrideSubtargetInfo(const EngineImpl &Eng, llvm::ArrayRef<llvm::SubtargetSubTypeKV> PD,
                        const llvm::MCWriteProcResEntry *WPR, const llvm::MCWriteLatencyEntry *WL,
                        const llvm::MCReadAdvanceEntry *RA,
                        const std::unordered_map<uint64_t, unsigned> &Priv,
                        const std::unordered_map<unsigned, unsigned> &Slow)
      // No feature table: the features are copied from the original subtarget
      // (LLVM 14 does not expose its feature and processor tables).
      : MCSubtargetInfo(Eng.TT, Eng.STI->getCPU(), Eng.STI->getCPU(), "", {}, PD, WPR, WL, RA,
                        nullptr, nullptr, nullptr),
        E(Eng), Private(Priv), SlowLea(Slow) {
    setFeatureBits(Eng.STI->getFeatureBits());
  }

  // A slow LEA resolves to its slow form; anything else through the original
  // subtarget, then to the opcode's private class, or else to the untouched
  // clone of the resolved class.
  unsigned resolveVariantSchedClass(unsigned SchedClass, const llvm::MCInst *MI,
                                    const llvm::MCInstrInfo *MCII, unsigned CPUID) const override {
    if (auto Slow = SlowLea.find(MI->getOpcode()); Slow != SlowLea.end() && slowLea(E, *MI)) return Slow->second;
    unsigned C = SchedClass;
    while (C && C < E.NumClasses && E.SM->getSchedClassDesc(C)->isVariant())
      C = E.STI->resolveVariantSchedClass(C, MI, MCII, CPUID);
    if (!C) return 0;
    auto It = Private.find((uint64_t(MI->getOpcode()) << 32) | C);
    return It != Private.end() ? It->second : C + E.NumClasses;
  }
};

}  // namespace dt

#include "partial_register.h"
#include "lowered_operands.h"

using namespace llvm;

namespace dt {

// AH, BH, CH and DH are renamed apart from their full register (uiCA's
// high8RenamedSeparately, Sandy Bridge to Skylake): writing one waits for nothing.
static bool isHigh8(const EngineImpl &E, MCRegister R) {
  const StringRef Name = E.MRI->getName(R);
  return Name == "AH" || Name == "BH" || Name == "CH" || Name == "DH";
}

MCRegister mergedInto(const EngineImpl &E, MCRegister R) {
  if (!R || isHigh8(E, R)) return MCRegister();
  const auto Full = llvm::find_if(E.Gpr64, [&](MCRegister G) { return G != R && E.MRI->isSubRegister(G, R); });
  return Full == E.Gpr64.end() ? MCRegister() : *Full;
}

unsigned mergePartialWrites(const EngineImpl &E, SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                            std::vector<std::unique_ptr<mca::ReadDescriptor>> &Owned) {
  unsigned Changed = 0;
  for (auto &Inst : Lowered) {
    auto &Uses = Inst->getUses();
    // A dependency-breaking idiom (xorb %al, %al) waits for nothing. A load's merge is
    // its last µop, one cycle, where the read added here would hold the whole load
    // (MCA gives a read no ReadAdvance of its own): loads are left as llvm-mca has them.
    if (Inst->getMayLoad() ||
        llvm::any_of(Uses, [](const mca::ReadState &R) { return R.isIndependentFromDef(); }))
      continue;
    SmallVector<MCRegister, 2> Merged;
    for (const mca::WriteState &W : Inst->getDefs()) {
      const MCRegister R = W.getRegisterID();
      const MCRegister Full = W.clearsSuperRegisters() ? MCRegister() : mergedInto(E, R);
      if (!Full) continue;
      const bool Read = llvm::any_of(Uses, [&](const mca::ReadState &U) {
        return U.getRegisterID() && E.MRI->regsOverlap(U.getRegisterID(), R);
      });
      if (!Read && !llvm::is_contained(Merged, Full)) Merged.push_back(Full);
    }
    for (MCRegister Full : Merged) addRead(*Inst, Full, Owned);
    Changed += !Merged.empty();
  }
  return Changed;
}

}  // namespace dt

#include "folded_load.h"

using namespace llvm;

namespace dt {

bool foldsLoad(const MCInstrDesc &D) { return D.mayLoad() && !D.mayStore(); }

Row foldedRow(const Row &R, unsigned &Cycles) {
  Cycles = 0;
  int Load = 0;
  for (const ReadAdvance &A : R.read_advance) Load = std::max(Load, A.cycles);
  if (Load <= 0) return R;
  Row Out = R;
  for (int &L : Out.latency) L -= std::min(L, Load);
  Out.read_advance.clear();
  for (const ReadAdvance &A : R.read_advance)
    if (A.cycles != Load) Out.read_advance.push_back({A.use, A.write_id, A.cycles - Load});
  Cycles = Load;
  return Out;
}

void foldClasses(const EngineImpl &E, TableImpl &T, const std::function<Row(unsigned)> &RowOf) {
  const unsigned N = E.NumClasses;
  std::vector<bool> Foldable(N);
  for (unsigned C = 1; C < N; ++C) {
    const MCSchedClassDesc &D = *E.SM->getSchedClassDesc(C);
    for (unsigned I = 0; I < D.NumReadAdvanceEntries; ++I)
      Foldable[C] = Foldable[C] || E.RA[D.ReadAdvanceIdx + I].Cycles > 0;
    Foldable[C] = Foldable[C] && E.isValidClass(C) && !D.isVariant();
  }
  for (unsigned O = 0; O < E.MCII->getNumOpcodes(); ++O)
    if (!foldsLoad(E.MCII->get(O))) Foldable[E.staticClass(O)] = false;
  for (unsigned C = 1; C < N; ++C) {
    if (!Foldable[C]) continue;
    unsigned Load = 0;
    const Row F = foldedRow(RowOf(C), Load);
    if (!Load) continue;
    const unsigned WL = T.WL.size(), RA = T.RA.size();
    const MCSchedClassDesc &D = *E.SM->getSchedClassDesc(C);
    for (unsigned I = 0; I < D.NumWriteLatencyEntries; ++I)
      T.WL.push_back({(int16_t)F.latency[I], E.WL[D.WriteLatencyIdx + I].WriteResourceID});
    for (const ReadAdvance &A : F.read_advance) T.RA.push_back({(unsigned)A.use, (unsigned)A.write_id, A.cycles});
    for (unsigned Copy : {C, C + N}) {  // the original, and the clone an opcode routed through the hook resolves to
      MCSchedClassDesc &Into = T.Classes[Copy];
      Into.WriteLatencyIdx = WL;
      Into.ReadAdvanceIdx = RA;
      Into.NumReadAdvanceEntries = F.read_advance.size();
      T.Folded[Copy] = Load;
    }
  }
}

std::vector<FoldedLoad> foldedLoads(const EngineImpl &E, const TableImpl &T, const BlockImpl &B) {
  std::vector<FoldedLoad> Out(B.Insts.size());
  for (size_t I = 0; I < B.Insts.size(); ++I) {
    const MCInst &MI = B.Insts[I];
    unsigned C = E.staticClass(MI.getOpcode());  // the class MCA will give it under T
    if (T.Classes[C].isVariant()) C = T.STI->resolveVariantSchedClass(C, &MI, E.MCII.get(), E.SM->getProcessorID());
    auto It = T.Folded.find(C);
    if (It == T.Folded.end() || !foldsLoad(E.MCII->get(MI.getOpcode()))) continue;
    Out[I].Cycles = It->second;
    Out[I].AddressOps = addressOperands(E.MCII->get(MI.getOpcode()));
  }
  return Out;
}

}  // namespace dt

#include "forwarded_load.h"
#include "folded_load.h"
#include "lowered_operands.h"

using namespace llvm;

namespace dt {
namespace {

// One register written, no implicit write, and nothing read but the address.
bool plainLoad(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  if (!foldsLoad(D) || D.getNumDefs() != 1 || !D.implicit_defs().empty() || !D.implicit_uses().empty())
    return false;
  for (unsigned Op = D.getNumDefs(); Op < D.getNumOperands() && Op < MI.getNumOperands(); ++Op)
    if (D.operands()[Op].OperandType != MCOI::OPERAND_MEMORY && MI.getOperand(Op).isReg() &&
        MI.getOperand(Op).getReg())
      return false;
  return true;
}

}  // namespace

std::vector<bool> forwardedLoads(const EngineImpl &E, const BlockImpl &B) {
  const size_t N = B.Insts.size();
  std::vector<bool> Out(N);
  if (!B.Memory || B.Memory->ByInstr.size() != N) return Out;
  const MemoryMap &M = *B.Memory;
  for (size_t I = 0; I < N; ++I) {
    if (M.ByInstr[I].empty() || !plainLoad(E, B.Insts[I])) continue;
    const size_t Iteration = M.ByInstr[I].size() >= 2 ? 1 : 0;
    bool Forwarded = false, Failed = false;
    for (const Access &L : accessesAt(M, I, Iteration)) {
      if (L.store) continue;
      // the youngest older store that writes any of its bytes decides
      for (size_t Back = 1; Back <= N && Back <= Iteration * N + I; ++Back) {
        const size_t At = Iteration * N + I - Back, J = At % N;
        if (M.ByInstr[J].empty()) continue;
        bool Reads = false, Whole = false;
        for (const Access &W : accessesAt(M, J, At / N))
          if (W.store && overlap(L.address, L.size, W.address, W.size)) {
            Reads = true;
            Whole |= contains(W, L);
          }
        if (!Reads) continue;
        Forwarded |= Whole;
        Failed |= !Whole;
        break;
      }
    }
    Out[I] = Forwarded && !Failed;
  }
  return Out;
}

void timeForwardedLoads(const BlockImpl &B,
                        SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered, const Globals &G,
                        std::vector<std::unique_ptr<mca::WriteDescriptor>> &Owned) {
  const unsigned Latency = G.param("forwarded_load_latency");
  if (!B.Memory) return;
  const std::vector<bool> &Forwarded = B.Memory->Forwarded;
  for (size_t I = 0; I < Forwarded.size(); ++I)
    if (Forwarded[I]) retimeWrites(B.Insts[I], *Lowered[I], [&](unsigned) { return Latency; }, Owned);
}

}  // namespace dt

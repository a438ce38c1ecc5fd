#include "dtlb_miss.h"
#include "lowered_operands.h"

using namespace llvm;

namespace dt {
namespace {

constexpr size_t kEntries = 64;  // the first-level DTLB's 4 KiB entries (Sandy Bridge to Skylake)
constexpr size_t kSteady = 16;   // iterations run before the ones judged
constexpr size_t kJudged = 4;    // iterations judged: a load misses in all of them

// A fully associative TLB, least recently used first out: whether a page hits.
struct Tlb {
  std::vector<uint64_t> Pages;  // most recent last
  bool touch(uint64_t Page) {
    const auto At = std::find(Pages.begin(), Pages.end(), Page);
    const bool Hit = At != Pages.end();
    if (Hit) Pages.erase(At);
    Pages.push_back(Page);
    if (Pages.size() > kEntries) Pages.erase(Pages.begin());
    return Hit;
  }
};

// Whether each instruction's memory operand has a base or index register whose
// value derives from a value the block loads (followed twice around the loop).
std::vector<bool> loadDrivenAddresses(const EngineImpl &E, const BlockImpl &B) {
  const size_t N = B.Insts.size();
  std::vector<bool> Out(N);
  std::vector<MCRegister> Driven;  // registers whose value derives from a load
  std::vector<InstrOperands> Ops;  // what each instruction breaks and whether it is a push or pop
  for (const MCInst &MI : B.Insts) Ops.push_back(instrOperands(E, MI));
  const auto driven = [&](MCRegister R) {
    return R && llvm::any_of(Driven, [&](MCRegister D) { return E.MRI->regsOverlap(D, R); });
  };
  for (size_t Pass = 0; Pass < 2; ++Pass)
    for (size_t I = 0; I < N; ++I) {
      const MCInst &MI = B.Insts[I];
      const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
      const bool Breaking = Ops[I].dependency_breaking;
      bool Fed = D.mayLoad();
      SmallVector<MCRegister, 4> Writes;
      for (unsigned Op = 0; Op < MI.getNumOperands(); ++Op) {
        const MCOperand &O = MI.getOperand(Op);
        if (!O.isReg() || !O.getReg()) continue;
        if (Op < D.getNumDefs()) {
          Writes.push_back(O.getReg());
          continue;
        }
        const bool Address = Op < D.getNumOperands() && D.operands()[Op].OperandType == MCOI::OPERAND_MEMORY;
        if (Address && Pass == 1 && driven(O.getReg())) Out[I] = true;
        if (!Breaking) Fed |= driven(O.getReg());
      }
      for (MCPhysReg R : D.implicit_uses()) Fed |= driven(R);
      for (MCPhysReg R : D.implicit_defs())
        if (!Ops[I].stack_op || R != E.RSP) Writes.push_back(R);  // a pop's RSP is not the value it loads
      for (MCRegister W : Writes) {
        llvm::erase_if(Driven, [&](MCRegister D) { return E.MRI->regsOverlap(D, W); });
        if (Fed) Driven.push_back(W);
      }
    }
  return Out;
}

// Whether every access of instruction I keeps one stride over the recorded iterations.
bool strided(const MemoryMap &M, size_t I) {
  const auto &ByIteration = M.ByInstr[I];
  if (ByIteration.size() < 2 || ByIteration[0].empty()) return false;
  for (size_t K = 1; K < ByIteration.size(); ++K) {
    if (ByIteration[K].size() != ByIteration[0].size()) return false;
    for (size_t J = 0; J < ByIteration[0].size(); ++J)
      if (ByIteration[K][J].address - ByIteration[K - 1][J].address !=
          ByIteration[1][J].address - ByIteration[0][J].address)
        return false;
  }
  return true;
}

}  // namespace

std::vector<bool> dtlbMisses(const EngineImpl &E, const BlockImpl &B) {
  const size_t N = B.Insts.size();
  if (!B.Memory || !B.Memory->Exact || B.Memory->ByInstr.size() != N) return std::vector<bool>(N);
  const MemoryMap &M = *B.Memory;
  const std::vector<bool> Driven = loadDrivenAddresses(E, B);
  std::vector<size_t> Missed(N);  // judged iterations in which the instruction's loads missed
  Tlb T;
  for (size_t K = 0; K < kSteady + kJudged; ++K)
    for (size_t I = 0; I < N; ++I) {
      bool Miss = false, Loads = false;
      for (const Access &A : accessesAt(M, I, K)) {
        const bool First = !T.touch(A.address / kPage);
        const bool Last = A.size > 0 && !T.touch((A.address + A.size - 1) / kPage);
        if (!A.store) Loads = true, Miss |= First || Last;
      }
      if (K >= kSteady && Loads && Miss) ++Missed[I];
    }
  std::vector<bool> Out(N);
  for (size_t I = 0; I < N; ++I) Out[I] = Driven[I] && strided(M, I) && Missed[I] == kJudged;
  return Out;
}

void timeDtlbMisses(const BlockImpl &B, SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                    const Globals &G, std::vector<std::unique_ptr<mca::WriteDescriptor>> &Owned) {
  const unsigned Penalty = G.param("dtlb_miss_latency");
  if (!B.Memory) return;
  const std::vector<bool> &Misses = B.Memory->DtlbMissed;
  for (size_t I = 0; I < Misses.size(); ++I)
    if (Misses[I]) retimeWrites(B.Insts[I], *Lowered[I], [&](unsigned L) { return L + Penalty; }, Owned);
}

}  // namespace dt

#include "pointer_chasing.h"
#include "front_end.h"
#include "lowered_operands.h"

using namespace llvm;

namespace dt {
namespace {

constexpr int64_t kShortDisplacement = 2048;

// The base register of MI's memory operand when it is a simple pointer
// dereference (base + displacement in [0, 2048), no index, no segment, not RIP).
MCRegister simpleBase(const EngineImpl &E, const MCInst &MI) {
  const MemOperand M = memOperand(E, MI);
  if (!E.MCII->get(MI.getOpcode()).mayLoad() || !M.Present || !M.Base || M.Indexed || M.Segmented ||
      M.RipRelative || !M.ImmediateDisp || M.Disp < 0 || M.Disp >= kShortDisplacement)
    return MCRegister();
  return M.Base;
}

// A plain load of a pointer: what the short path follows (uiCA's list).
bool loadsPointer(const EngineImpl &E, const MCInst &MI) {
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  return Name == "MOV64rm" || Name == "MOV32rm" || Name == "MOVSX64rm32" || Name == "POP64r";
}

bool writes(const EngineImpl &E, const MCInst &MI, MCRegister R) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  for (unsigned I = 0; I < D.getNumDefs() && I < MI.getNumOperands(); ++I)
    if (MI.getOperand(I).isReg() && MI.getOperand(I).getReg() && E.MRI->regsOverlap(MI.getOperand(I).getReg(), R))
      return true;
  return llvm::any_of(D.implicit_defs(), [&](MCPhysReg W) { return E.MRI->regsOverlap(W, R); });
}

}  // namespace

std::vector<bool> pointerChases(const EngineImpl &E, const BlockImpl &B) {
  const size_t N = B.Insts.size();
  std::vector<bool> Out(N);
  for (size_t I = 0; I < N; ++I) {
    const MCRegister Base = simpleBase(E, B.Insts[I]);
    if (!Base) continue;
    for (size_t Back = 1; Back <= N; ++Back) {  // the last writer, around the loop (I itself last)
      const MCInst &W = B.Insts[(I + N - Back) % N];
      if (!writes(E, W, Base)) continue;
      Out[I] = loadsPointer(E, W);
      break;
    }
  }
  return Out;
}

void shortenPointerChases(const EngineImpl &E, const BlockImpl &B,
                          SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered, const Globals &G,
                          std::vector<std::unique_ptr<mca::WriteDescriptor>> &Owned) {
  const unsigned Saving = G.param("pointer_chase_saving");
  if (!Saving) return;
  const std::vector<bool> Chases = pointerChases(E, B);
  for (size_t I = 0; I < Chases.size(); ++I)
    if (Chases[I]) retimeWrites(B.Insts[I], *Lowered[I], [&](unsigned L) { return L - std::min(L, Saving); }, Owned);
}

}  // namespace dt

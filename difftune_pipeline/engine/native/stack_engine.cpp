#include "stack_engine.h"

using namespace llvm;

namespace dt {
namespace {

bool isRsp(const EngineImpl &E, MCPhysReg R) { return R && E.MRI->isSubRegisterEq(E.RSP, R); }

bool namesRsp(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  for (const MCOperand &Op : MI)
    if (Op.isReg() && isRsp(E, Op.getReg())) return true;
  for (MCPhysReg R : D.implicit_uses())
    if (isRsp(E, R)) return true;
  for (MCPhysReg R : D.implicit_defs())
    if (isRsp(E, R)) return true;
  return false;
}

}  // namespace

// RSP is both an implicit use and an implicit def (push, pop and their flag and
// immediate forms). leave and enter are not: they copy RBP.
bool isStackOp(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  if (Name.starts_with("LEAVE") || Name.starts_with("ENTER")) return false;
  auto Has = [&](ArrayRef<MCPhysReg> Regs) {
    return llvm::any_of(Regs, [&](MCPhysReg R) { return isRsp(E, R); });
  };
  return Has(D.implicit_uses()) && Has(D.implicit_defs());
}

std::vector<unsigned> applyStackEngine(const EngineImpl &E, const BlockImpl &B,
                                       SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                                       const Globals &G,
                                       std::vector<std::unique_ptr<mca::WriteDescriptor>> &Owned) {
  const unsigned SyncUops = G.param("stack_sync_uops");
  const size_t N = B.Insts.size();
  std::vector<bool> Stack(N), Explicit(N), Sync(N);
  for (size_t I = 0; I < N; ++I) {
    Stack[I] = isStackOp(E, B.Insts[I]);
    Explicit[I] = !Stack[I] && namesRsp(E, B.Insts[I]);
    if (!Stack[I]) continue;
    auto &Defs = Lowered[I]->getDefs();
    Defs.erase(std::remove_if(Defs.begin(), Defs.end(),
                              [&](const mca::WriteState &W) { return isRsp(E, W.getRegisterID()); }),
               Defs.end());
  }
  for (size_t I = 0; I < N; ++I) {
    if (!Explicit[I]) continue;
    for (size_t Back = 1; Back <= N; ++Back) {  // to the previous explicit use, around the loop
      const size_t J = (I + N - Back) % N;
      if (Stack[J]) {
        Sync[I] = true;
        break;
      }
      if (Explicit[J]) break;
    }
    if (!Sync[I] || !SyncUops) continue;
    const MCInst &MI = B.Insts[I];
    auto WritesRsp = [&](const mca::WriteDescriptor &D) {
      if (D.isImplicitWrite()) return isRsp(E, D.RegisterID);
      const MCOperand &Op = MI.getOperand(D.OpIndex);
      return Op.isReg() && isRsp(E, Op.getReg());
    };
    const auto &Descs = Lowered[I]->getDesc().Writes;
    const auto RspDesc = llvm::find_if(Descs, WritesRsp);
    if (RspDesc == Descs.end()) continue;
    for (mca::WriteState &W : Lowered[I]->getDefs()) {
      if (!isRsp(E, W.getRegisterID())) continue;
      Owned.push_back(std::make_unique<mca::WriteDescriptor>(*RspDesc));
      Owned.back()->Latency += SyncUops;
      W = mca::WriteState(*Owned.back(), W.getRegisterID(), W.clearsSuperRegisters(), W.isWriteZero());
    }
  }
  std::vector<unsigned> Out(N);
  for (size_t I = 0; I < N; ++I) Out[I] = Sync[I] ? SyncUops : 0;
  return Out;
}

}  // namespace dt

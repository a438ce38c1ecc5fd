#include "move_elimination.h"

#include <set>

#include "lowered_operands.h"

using namespace llvm;

namespace dt {
namespace {

const std::set<std::string> &moveOpcodes() {
  static const std::set<std::string> Names = [] {
    std::set<std::string> N;
    for (const char *Base : {"MOV64rr", "MOV32rr", "MOVAPSrr", "MOVAPDrr", "MOVUPSrr", "MOVUPDrr", "MOVDQArr",
                             "MOVDQUrr", "VMOVAPSrr", "VMOVAPDrr", "VMOVUPSrr", "VMOVUPDrr", "VMOVDQArr",
                             "VMOVDQUrr", "VMOVAPSYrr", "VMOVAPDYrr", "VMOVUPSYrr", "VMOVUPDYrr", "VMOVDQAYrr",
                             "VMOVDQUYrr"}) {
      N.insert(Base);
      N.insert(std::string(Base) + "_REV");
    }
    return N;
  }();
  return Names;
}

// Whole registers only, as LLVM's own register files name them: were GR32 a class
// of its own, MCA would rename EDX apart from RDX (a 64-bit read after a
// zero-extending movl would still see RDX's previous writer), and a write of AL
// would not wait for RAX's last writer, which it merges into.
const char *const kClasses[] = {"GR64", "VR128", "VR256"};

}  // namespace

void describeRenamedRegisters(const EngineImpl &E, TableImpl &T) {
  T.CostTable.clear();
  for (unsigned C = 0; C < E.MRI->getNumRegClasses(); ++C) {
    const std::string Name = E.MRI->getRegClassName(&E.MRI->getRegClass(C));
    for (const char *Wanted : kClasses)
      if (Name == Wanted) T.CostTable.push_back(MCRegisterCostEntry{C, 1, /*AllowMoveElimination=*/false});
  }
  // Entry 0 is the invalid file MCA skips; entry 1 holds every renamed register.
  T.RegisterFiles = {MCRegisterFileDesc{"InvalidRegisterFile", 0, 0, 0, 0, false},
                     MCRegisterFileDesc{"Renamed", 4096, (uint16_t)T.CostTable.size(), 0, 0, false}};
  if (!E.SM->hasExtraProcessorInfo()) T.EPI = MCExtraProcessorInfo{};
  T.EPI.RegisterFiles = T.RegisterFiles.data();
  T.EPI.NumRegisterFiles = T.RegisterFiles.size();
  T.EPI.RegisterCostTable = T.CostTable.data();
  T.EPI.NumRegisterCostEntries = T.CostTable.size();
  T.SM.ExtraProcessorInfo = &T.EPI;
}

std::vector<std::string> eliminableMoves() { return {moveOpcodes().begin(), moveOpcodes().end()}; }

unsigned renamesPerCycle(const Globals &G) { return G.param("moves_eliminated"); }

std::vector<const mca::Instruction *> renameMoves(const EngineImpl &E, const BlockImpl &B,
                                                  SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                                                  RenamedMoves &Owned) {
  std::vector<const mca::Instruction *> Executed(B.Insts.size(), nullptr);
  for (size_t I = 0; I < B.Insts.size(); ++I) {
    const MCInst &MI = B.Insts[I];
    if (!moveOpcodes().count(E.MCII->getName(MI.getOpcode()).str()) || MI.getNumOperands() < 2) continue;
    const MCOperand &Dst = MI.getOperand(0), &Src = MI.getOperand(1);
    if (!Dst.isReg() || !Src.isReg() || Dst.getReg() == Src.getReg()) continue;
    const mca::Instruction &Old = *Lowered[I];
    const mca::InstrDesc &D = Old.getDesc();
    auto Desc = std::make_unique<mca::InstrDesc>();
    Desc->Writes = D.Writes;
    for (mca::WriteDescriptor &W : Desc->Writes) W.Latency = 0;
    Desc->Reads = D.Reads;
    Desc->UsedBuffers = Desc->UsedProcResUnits = Desc->UsedProcResGroups = 0;  // no port, no scheduler entry
    Desc->MaxLatency = 0;
    Desc->NumMicroOps = D.NumMicroOps;  // issue slots and the reorder buffer, as before
    Desc->SchedClassID = D.SchedClassID;
    Desc->MustIssueImmediately = Desc->IsRecyclable = Desc->HasPartiallyOverlappingGroups = 0;
    auto Renamed = std::make_unique<mca::Instruction>(*Desc, Old.getOpcode());
    Renamed->setMayLoad(false);
    Renamed->setMayStore(false);
    Renamed->setHasSideEffects(Old.getHasSideEffects());
    Renamed->setBeginGroup(Old.getBeginGroup());
    Renamed->setEndGroup(Old.getEndGroup());
    Renamed->setRetireOOO(Old.getRetireOOO());
    Renamed->getDefs().append(Old.getDefs().begin(), Old.getDefs().end());
    Renamed->getUses().append(Old.getUses().begin(), Old.getUses().end());
    retimeWrites(MI, *Renamed, [](unsigned) { return 0u; }, Owned.Writes);
    Owned.Descs.push_back(std::move(Desc));
    Executed[I] = Lowered[I].get();
    Owned.Executed.push_back(std::move(Lowered[I]));
    Lowered[I] = std::move(Renamed);
  }
  return Executed;
}

}  // namespace dt

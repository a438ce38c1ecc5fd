#include "move_elimination.h"

#include <set>

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
// of its own, MCA would rename EDX apart from RDX, and a 64-bit read after an
// eliminated (zero-extending) movl would still see RDX's previous writer.
const char *const kClasses[] = {"GR64", "VR128", "VR256"};

}  // namespace

std::vector<std::string> eliminableMoves() { return {moveOpcodes().begin(), moveOpcodes().end()}; }

void describeMoveElimination(const EngineImpl &E, const Globals &G, TableImpl &T) {
  const unsigned PerCycle = G.param("moves_eliminated");
  T.CostTable.clear();
  for (unsigned C = 0; C < E.MRI->getNumRegClasses(); ++C) {
    const std::string Name = E.MRI->getRegClassName(&E.MRI->getRegClass(C));
    for (const char *Wanted : kClasses)
      if (Name == Wanted) T.CostTable.push_back(MCRegisterCostEntry{C, 1, true});
  }
  // Entry 0 is the invalid file MCA skips; entry 1 holds every renamed register.
  T.RegisterFiles = {MCRegisterFileDesc{"InvalidRegisterFile", 0, 0, 0, 0, false},
                     MCRegisterFileDesc{"Renamed", 4096, (uint16_t)T.CostTable.size(), 0, (uint16_t)PerCycle, false}};
  if (!E.SM->hasExtraProcessorInfo()) T.EPI = MCExtraProcessorInfo{};
  T.EPI.RegisterFiles = T.RegisterFiles.data();
  T.EPI.NumRegisterFiles = T.RegisterFiles.size();
  T.EPI.RegisterCostTable = T.CostTable.data();
  T.EPI.NumRegisterCostEntries = T.CostTable.size();
  T.SM.ExtraProcessorInfo = &T.EPI;
}

void markEliminableMoves(const EngineImpl &E, const BlockImpl &B,
                         SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered) {
  for (size_t I = 0; I < B.Insts.size(); ++I) {
    const MCInst &MI = B.Insts[I];
    if (!moveOpcodes().count(E.MCII->getName(MI.getOpcode()).str()) || MI.getNumOperands() < 2) continue;
    const MCOperand &Dst = MI.getOperand(0), &Src = MI.getOperand(1);
    if (Dst.isReg() && Src.isReg() && Dst.getReg() != Src.getReg()) Lowered[I]->setOptimizableMove();
  }
}

}  // namespace dt

#include "slow_lea.h"

using namespace llvm;

namespace dt {

// An LEA's address operands follow its destination: base, scale, index,
// displacement, segment (LLVM's X86 memory operand; not typed as memory, as LEA
// reads none).
bool slowLea(const EngineImpl &E, const MCInst &MI) {
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  if (llvm::none_of(kLeaOpcodes, [&](const char *L) { return Name == L; }) || MI.getNumOperands() < 5) return false;
  const MCOperand &Base = MI.getOperand(1), &Index = MI.getOperand(3), &Disp = MI.getOperand(4);
  if (!Base.isReg() || !Base.getReg() || !Index.isReg() || !Index.getReg()) return false;
  const StringRef B = E.MRI->getName(Base.getReg());
  if (B == "RIP" || B == "EIP") return false;
  const bool Displaced = !Disp.isImm() || Disp.getImm() != 0;
  return Displaced || B == "RBP" || B == "R13" || B == "EBP" || B == "R13D";
}

unsigned slowLeaPort(const EngineImpl &E) {
  auto Port = llvm::find_if(E.ResourceByName, [&](const auto &R) {
    return !E.Gen.slow_lea_port.empty() && StringRef(R.getKey()).ends_with(E.Gen.slow_lea_port);
  });
  return Port == E.ResourceByName.end() ? 0 : Port->getValue();
}

std::vector<SlowForm> slowForms(const EngineImpl &E, const TableImpl &T) {
  const unsigned Port = slowLeaPort(E);
  if (!Port) invalid("globals", "slow_lea: no port named *" + E.Gen.slow_lea_port + " in the " + E.Mcpu + " model");
  std::vector<SlowForm> Out;
  for (const char *Name : kLeaOpcodes) {
    auto Opcode = E.OpcodeByName.find(Name);
    if (Opcode == E.OpcodeByName.end()) continue;
    const unsigned Static = E.staticClass(Opcode->second);
    if (!E.isValidClass(Static) || E.SM->getSchedClassDesc(Static)->isVariant()) continue;
    auto Own = T.Private.find((uint64_t(Opcode->second) << 32) | Static);
    const unsigned Fast = Own != T.Private.end() ? Own->second : Static + E.NumClasses;  // its row's class
    SlowForm F{Opcode->second, Static, {}, Port};
    F.R.uops = T.Classes[Fast].NumMicroOps;
    F.R.latency.assign(E.SM->getSchedClassDesc(Static)->NumWriteLatencyEntries, T.G.param("slow_lea_latency"));
    Out.push_back(std::move(F));
  }
  return Out;
}

}  // namespace dt

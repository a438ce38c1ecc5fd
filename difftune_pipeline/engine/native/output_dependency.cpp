#include "output_dependency.h"
#include "lowered_operands.h"

using namespace llvm;

namespace dt {

// Whether MI reads its destination register under the generation's rule: a
// register form of an opcode the generation's reads_destination names.
static bool readsDestination(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  // A load form is left as llvm-mca has it: the read would hold its load too.
  if (D.mayLoad() || D.getNumDefs() == 0 || !MI.getOperand(0).isReg() || !MI.getOperand(0).getReg()) return false;
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  return llvm::any_of(E.Gen.reads_destination, [&](const std::string &Opcode) {
    return Name.starts_with(Opcode) && Name.drop_front(Opcode.size()).contains("rr");
  });
}

// Whether MI, a register form of an opcode the generation's reads_flags names,
// waits for the flags' last writer: it keeps some of the flags it writes.
static bool readsFlags(const EngineImpl &E, const MCInst &MI) {
  if (E.MCII->get(MI.getOpcode()).mayLoad()) return false;  // as above: the read would hold its load
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  return llvm::any_of(E.Gen.reads_flags, [&](const std::string &Opcode) { return Name.starts_with(Opcode); });
}

unsigned readDestinations(const EngineImpl &E, const BlockImpl &B,
                          SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                          std::vector<std::unique_ptr<mca::ReadDescriptor>> &Owned) {
  unsigned Changed = 0;
  for (size_t I = 0; I < B.Insts.size(); ++I) {
    const bool Destination = readsDestination(E, B.Insts[I]), Flags = readsFlags(E, B.Insts[I]);
    if (Destination) addRead(*Lowered[I], B.Insts[I].getOperand(0).getReg(), Owned);
    if (Flags) addRead(*Lowered[I], E.EFLAGS, Owned);
    Changed += Destination || Flags;
  }
  return Changed;
}

}  // namespace dt

// Retiming a lowered instruction's register writes: MCA reads a write's latency
// from its descriptor, which the InstrBuilder shares between every instruction
// of the opcode, so a mechanism that times one instruction differently gives
// its writes copies of their descriptors (pointer_chasing, forwarded_load).
#pragma once

#include "llvm/MC/MCInst.h"
#include "llvm/MCA/Instruction.h"

#include <functional>
#include <memory>
#include <vector>

namespace dt {

// Every register write of I (lowered from MI) takes Latency(its current
// latency). The copies are kept in Owned, which must outlive the simulation.
inline void retimeWrites(const llvm::MCInst &MI, llvm::mca::Instruction &I,
                         const std::function<unsigned(unsigned)> &Latency,
                         std::vector<std::unique_ptr<llvm::mca::WriteDescriptor>> &Owned) {
  const auto &Descs = I.getDesc().Writes;
  for (llvm::mca::WriteState &W : I.getDefs()) {
    const auto Desc = llvm::find_if(Descs, [&](const llvm::mca::WriteDescriptor &D) {
      if (D.isImplicitWrite()) return D.RegisterID == W.getRegisterID();
      const llvm::MCOperand &Op = MI.getOperand(D.OpIndex);
      return Op.isReg() && Op.getReg() == W.getRegisterID();
    });
    if (Desc == Descs.end()) continue;
    Owned.push_back(std::make_unique<llvm::mca::WriteDescriptor>(*Desc));
    Owned.back()->Latency = Latency(W.getLatency());  // the current one: a sync may lengthen it
    W = llvm::mca::WriteState(*Owned.back(), W.getRegisterID(), W.clearsSuperRegisters(), W.isWriteZero());
  }
}

}  // namespace dt

// A lowered instruction's operands changed for one instruction of a block: MCA
// reads a write's latency from its descriptor, which the InstrBuilder shares
// between every instruction of the opcode, so a mechanism that times one
// instruction differently gives its writes copies of their descriptors
// (pointer_chasing, forwarded_load, dtlb_miss); a read a mechanism adds
// (partial_register, output_dependency) gets a descriptor of its own.
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

// Adds to I a read of register Reg that no ReadAdvance entry applies to (a use
// index no scheduling class has one for). Its descriptor is kept in Owned,
// which must outlive the simulation.
inline void addRead(llvm::mca::Instruction &I, llvm::MCRegister Reg,
                    std::vector<std::unique_ptr<llvm::mca::ReadDescriptor>> &Owned) {
  constexpr unsigned kAddedUse = 1000;
  Owned.push_back(std::make_unique<llvm::mca::ReadDescriptor>());
  llvm::mca::ReadDescriptor &D = *Owned.back();
  D.OpIndex = -1;  // an implicit read
  D.UseIndex = kAddedUse;
  D.RegisterID = Reg;
  D.SchedClassID = I.getDesc().SchedClassID;
  I.getUses().emplace_back(D, Reg);
}

}  // namespace dt

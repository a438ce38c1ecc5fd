// What one simulation did, cycle by cycle: the events behind llvm-mca's timeline,
// resource-pressure and bottleneck views, collected from MCA's own events. It is
// attached only when a trace is requested, so plain simulations pay nothing.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/HWEventListener.h"
#include "llvm/MCA/Instruction.h"
#include "llvm/MCA/Support.h"

#include <map>

namespace dt {

class TraceListener final : public llvm::mca::HWEventListener {
  const size_t BlockSize, Shown;  // instructions per iteration; entries recorded
  Trace &Out;
  std::vector<unsigned> FirstUnit;                // per resource: index of its first unit (or ~0u)
  std::vector<llvm::mca::ReleaseAtCycles> Usage;  // [instruction (last: block)][unit]
  std::map<size_t, const llvm::mca::Instruction *> Waiting;  // dispatched, not yet issued
  int Cycle = 0;
  unsigned LastIteration = 0;
  bool Resources = false, Registers = false, Memory = false;  // pressure reasons this cycle

  void wait(size_t Index, const char *Cause);

 public:
  TraceListener(const llvm::MCSchedModel &SM, size_t BlockSize, size_t Shown, Trace &Out);
  void onEvent(const llvm::mca::HWInstructionEvent &Ev) override;
  void onEvent(const llvm::mca::HWStallEvent &Ev) override;
  void onEvent(const llvm::mca::HWPressureEvent &Ev) override;
  void onCycleEnd() override;
  // Resource pressure per iteration, as llvm-mca's view divides it.
  void finish();
};

}  // namespace dt

// The last stage of every simulation: a cycle budget, and (opt-in) fast-forward.
#pragma once

#include "llvm/MCA/HWEventListener.h"
#include "llvm/MCA/Stages/Stage.h"

#include <cstdint>
#include <vector>

namespace dt {

// Watches a simulation: ends it past its cycle budget, and (opt-in) fast-forwards
// it once the cycles between iterations repeat. It fails in cycleEnd: LLVM 14's
// Pipeline overwrites errors returned from cycleStart.
class MonitorStage final : public llvm::mca::Stage, public llvm::mca::HWEventListener {
  static constexpr size_t kWindow = 32, kMaxPeriod = 16;
  const uint64_t Cap;
  const unsigned BlockSize, Iterations;
  const bool FastForward;
  uint64_t Cycles = 0;
  std::vector<uint64_t> Retired;  // cycle in which each iteration's last instruction retired

  uint64_t delta(size_t I) const { return Retired[I] - Retired[I - 1]; }
  void detect();

 public:
  int64_t Extrapolated = -1;  // total cycles predicted by fast-forward
  MonitorStage(uint64_t Cap, unsigned BlockSize, unsigned Iterations, bool FastForward)
      : Cap(Cap), BlockSize(BlockSize), Iterations(Iterations), FastForward(FastForward) {}
  bool hasWorkToComplete() const override { return false; }
  bool isAvailable(const llvm::mca::InstRef &) const override { return true; }
  llvm::Error execute(llvm::mca::InstRef &) override { return llvm::ErrorSuccess(); }
  void onEvent(const llvm::mca::HWInstructionEvent &E) override;
  llvm::Error cycleEnd() override;
};

}  // namespace dt

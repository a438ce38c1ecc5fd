// The last stage of every simulation: a cycle budget, the steady state, and
// (opt-in) fast-forward.
#pragma once

#include "llvm/MCA/HWEventListener.h"
#include "llvm/MCA/Stages/Stage.h"

#include <cstdint>
#include <vector>

namespace dt {

// Watches a simulation: ends it past its cycle budget, measures its steady state
// (the cycles per iteration once the cycles between iterations repeat, as BHive's
// difference of two unroll counts measures a block: fill and drain cancel), and
// (opt-in) fast-forwards it once they repeat. It fails in cycleEnd: LLVM 14's
// Pipeline overwrites errors returned from cycleStart.
class MonitorStage final : public llvm::mca::Stage, public llvm::mca::HWEventListener {
  // The steady state's window: periods of up to 24 iterations, each seen twice,
  // and a fill that retires in a short repeating pattern for a few dozen
  // iterations is not taken for it. Fast-forward, which needs kSkipRepeats
  // repeats anyway, trusts a shorter one.
  static constexpr size_t kWindow = 48, kMaxPeriod = 24, kFastWindow = 32;
  // Iterations at the end of a run left out of its steady state: the last ones
  // retire with no younger instruction competing, which the drain shows.
  static constexpr size_t kDrain = 4;
  // Fast-forward trusts a period only once it has repeated this often: a fill
  // (stores filling the store buffer) can repeat twice with a long period before
  // the steady state begins.
  static constexpr size_t kSkipRepeats = 4;
  // A run simulated to the end finds its steady state with two repeats: within kWindow.
  static_assert(2 * kMaxPeriod <= kWindow, "the steady state's window must hold two periods");
  static_assert(kFastWindow <= kWindow, "fast-forward's window is no longer than the steady state's");
  const uint64_t Cap;
  const unsigned BlockSize, Iterations;
  const bool FastForward;
  uint64_t Cycles = 0;
  std::vector<uint64_t> Retired;  // cycle in which each iteration's last instruction retired

  // The repeating cycles found: in the last max(kFastWindow, kSkipRepeats * Period) of the first PeriodAt iterations.
  size_t PeriodAt = 0, Period = 0;
  bool OverCap = false;  // fast-forward found the run would end past the cycle budget

  uint64_t delta(size_t I) const { return Retired[I] - Retired[I - 1]; }
  size_t period(size_t K, size_t Repeats = 2, size_t MinWindow = kWindow) const;
  void detect();

 public:
  int64_t Extrapolated = -1;  // total cycles predicted by fast-forward
  MonitorStage(uint64_t Cap, unsigned BlockSize, unsigned Iterations, bool FastForward)
      : Cap(Cap), BlockSize(BlockSize), Iterations(Iterations), FastForward(FastForward) {}
  // Cycles per 100 iterations in steady state: over the period found, else the
  // average of the second half of the run (a run that never repeats: not Repeated).
  struct Steady {
    double PerHundred;
    bool Repeated;
  };
  Steady steady() const;
  bool hasWorkToComplete() const override { return false; }
  bool isAvailable(const llvm::mca::InstRef &) const override { return true; }
  llvm::Error execute(llvm::mca::InstRef &) override { return llvm::ErrorSuccess(); }
  void onEvent(const llvm::mca::HWInstructionEvent &E) override;
  llvm::Error cycleEnd() override;
};

}  // namespace dt

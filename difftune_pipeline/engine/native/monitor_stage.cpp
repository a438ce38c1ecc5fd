#include "monitor_stage.h"

#include "llvm/MCA/Instruction.h"

#include <algorithm>

using namespace llvm;

namespace dt {

// The smallest period P such that the last max(MinWindow, Repeats * P)
// per-iteration increments of the first K iterations repeat with it; 0 when none does.
size_t MonitorStage::period(size_t K, size_t Repeats, size_t MinWindow) const {
  for (size_t P = 1; P <= kMaxPeriod; ++P) {
    const size_t Window = std::max(MinWindow, Repeats * P);
    if (Window + P + 1 >= K) break;
    bool Periodic = true;
    for (size_t J = 0; J < Window && Periodic; ++J)
      Periodic = delta(K - 1 - J) == delta(K - 1 - J - P);
    if (Periodic) return P;
  }
  return 0;
}

// Once the last max(kFastWindow, kSkipRepeats * P) per-iteration increments are
// periodic with some period P, the remaining iterations are taken to follow the
// same pattern; a run that would then end past the cycle budget fails as it would
// simulated to the end.
void MonitorStage::detect() {
  const size_t K = Retired.size();
  if (K >= Iterations) return;
  const size_t P = period(K, kSkipRepeats, kFastWindow);
  if (!P) return;
  PeriodAt = K, Period = P;
  const size_t Remaining = Iterations - K;
  uint64_t Last = Retired[K - 1] + (Remaining / P) * (Retired[K - 1] - Retired[K - 1 - P]);
  for (size_t J = 0; J < Remaining % P; ++J) Last += delta(K - P + J);
  if (Last + 1 > Cap)
    OverCap = true;
  else
    Extrapolated = Last + 1;
}

MonitorStage::Steady MonitorStage::steady() const {
  size_t K = PeriodAt, P = Period;
  if (!P) {
    K = Retired.size() > kDrain ? Retired.size() - kDrain : 0;
    P = K ? period(K) : 0;
  }
  if (P) return {100.0 * (double)(Retired[K - 1] - Retired[K - 1 - P]) / (double)P, true};
  if (K >= 4) {  // no repeat: the second half's average
    const size_t H = K / 2;
    return {100.0 * (double)(Retired[K - 1] - Retired[H - 1]) / (double)(K - H), false};
  }
  if (Retired.empty()) return {0.0, false};
  return {100.0 * (double)(Retired.back() + 1) / (double)Retired.size(), false};
}

void MonitorStage::onEvent(const mca::HWInstructionEvent &E) {
  if (E.Type != mca::HWInstructionEvent::Retired ||
      E.IR.getSourceIndex() % BlockSize != BlockSize - 1)
    return;
  Retired.push_back(Cycles);
  if (FastForward && Extrapolated < 0 && !OverCap) detect();
}

Error MonitorStage::cycleEnd() {
  ++Cycles;
  if (Extrapolated >= 0) return createStringError(inconvertibleErrorCode(), "fast-forwarded");
  if (Cycles > Cap || OverCap)
    return createStringError(inconvertibleErrorCode(), "cycle cap of %llu cycles exceeded",
                             (unsigned long long)Cap);
  return ErrorSuccess();
}

}  // namespace dt

#include "monitor_stage.h"

#include "llvm/MCA/Instruction.h"

using namespace llvm;

namespace dt {

// Once the last kWindow per-iteration increments are periodic with some
// period P, the remaining iterations are taken to follow the same pattern.
void MonitorStage::detect() {
  const size_t K = Retired.size();
  if (K >= Iterations) return;
  for (size_t P = 1; P <= kMaxPeriod && kWindow + P + 1 < K; ++P) {
    bool Periodic = true;
    for (size_t J = 0; J < kWindow && Periodic; ++J)
      Periodic = delta(K - 1 - J) == delta(K - 1 - J - P);
    if (!Periodic) continue;
    const size_t Remaining = Iterations - K;
    uint64_t Last = Retired[K - 1] + (Remaining / P) * (Retired[K - 1] - Retired[K - 1 - P]);
    for (size_t J = 0; J < Remaining % P; ++J) Last += delta(K - P + J);
    Extrapolated = Last + 1;
    return;
  }
}

void MonitorStage::onEvent(const mca::HWInstructionEvent &E) {
  if (E.Type != mca::HWInstructionEvent::Retired ||
      E.IR.getSourceIndex() % BlockSize != BlockSize - 1)
    return;
  Retired.push_back(Cycles);
  if (FastForward && Extrapolated < 0) detect();
}

Error MonitorStage::cycleEnd() {
  ++Cycles;
  if (Extrapolated >= 0) return createStringError(inconvertibleErrorCode(), "fast-forwarded");
  if (Cycles > Cap)
    return createStringError(inconvertibleErrorCode(), "cycle cap of %llu cycles exceeded",
                             (unsigned long long)Cap);
  return ErrorSuccess();
}

}  // namespace dt

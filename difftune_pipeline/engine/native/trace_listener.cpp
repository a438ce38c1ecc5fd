#include "trace_listener.h"

using namespace llvm;

namespace dt {

TraceListener::TraceListener(const MCSchedModel &SM, size_t BlockSize, size_t Shown, Trace &Out)
    : BlockSize(BlockSize), Shown(Shown), Out(Out) {
  // Units in llvm-mca's order: every resource that is not a group, unit by unit.
  FirstUnit.assign(SM.getNumProcResourceKinds(), ~0u);
  for (unsigned I = 1; I < SM.getNumProcResourceKinds(); ++I) {
    const MCProcResourceDesc &R = *SM.getProcResource(I);
    if (R.SubUnitsIdxBegin || !R.NumUnits) continue;
    FirstUnit[I] = Out.units.size();
    for (unsigned J = 0; J < R.NumUnits; ++J)
      Out.units.push_back(R.NumUnits > 1 ? std::string(R.Name) + "." + std::to_string(J)
                                         : std::string(R.Name));
  }
  Usage.resize(Out.units.size() * (BlockSize + 1));
  Out.timeline.resize(Shown);
}

void TraceListener::wait(size_t Index, const char *Cause) {
  auto &W = Out.timeline[Index].waits;
  if (!W.empty() && W.back().last == Cycle) return;  // one cause per cycle: the first told
  if (!W.empty() && W.back().last == Cycle - 1 && W.back().cause == Cause)
    W.back().last = Cycle;
  else
    W.push_back({Cycle, Cycle, Cause});
}

void TraceListener::onEvent(const mca::HWInstructionEvent &Ev) {
  const size_t Index = Ev.IR.getSourceIndex();
  if (Ev.Type == mca::HWInstructionEvent::Dispatched) LastIteration = Index / BlockSize;
  if (Ev.Type == mca::HWInstructionEvent::Issued) {
    const auto &Issued = static_cast<const mca::HWInstructionIssuedEvent &>(Ev);
    const size_t Instr = Index % BlockSize;
    for (const auto &[Ref, Cycles] : Issued.UsedResources) {
      if (Ref.first >= FirstUnit.size() || FirstUnit[Ref.first] == ~0u) continue;  // not a unit: never issued
      const unsigned Unit = FirstUnit[Ref.first] + countr_zero(Ref.second);
      Usage[Instr * Out.units.size() + Unit] += Cycles;
      Usage[BlockSize * Out.units.size() + Unit] += Cycles;
    }
  }
  if (Index >= Shown) return;
  TraceEntry &T = Out.timeline[Index];
  switch (Ev.Type) {
    case mca::HWInstructionEvent::Dispatched:  // a multi-µop instruction may dispatch over cycles
      if (T.dispatched < 0) {
        T.dispatched = Cycle;
        Waiting[Index] = Ev.IR.getInstruction();
      }
      break;
    case mca::HWInstructionEvent::Ready: T.ready = Cycle; break;
    case mca::HWInstructionEvent::Issued:
      T.issued = Cycle;
      Waiting.erase(Index);
      break;
    case mca::HWInstructionEvent::Executed: T.executed = Cycle; break;
    case mca::HWInstructionEvent::Retired: T.retired = Cycle; break;
    default: break;
  }
}

// Stalls of the dispatch stage: the instruction could not enter the back end.
void TraceListener::onEvent(const mca::HWStallEvent &Ev) {
  static const char *const Causes[] = {"",
                                       "register-file-full",
                                       "rob-full",
                                       "dispatch-group",
                                       "scheduler-full",
                                       "load-queue-full",
                                       "store-queue-full",
                                       "custom-hazard"};
  ++Out.dispatch_stalls;
  const size_t Index = Ev.IR.getSourceIndex();
  if (Index < Shown && Ev.Type > 0 && Ev.Type < mca::HWStallEvent::LastGenericEvent)
    wait(Index, Causes[Ev.Type]);
}

// Backend pressure, counted per cycle the way llvm-mca's bottleneck analysis does.
void TraceListener::onEvent(const mca::HWPressureEvent &Ev) {
  switch (Ev.Reason) {
    case mca::HWPressureEvent::RESOURCES: Resources = true; break;
    case mca::HWPressureEvent::REGISTER_DEPS: Registers = true; break;
    case mca::HWPressureEvent::MEMORY_DEPS: Memory = true; break;
    default: break;
  }
}

// Each instruction still waiting after its dispatch cycle is charged this cycle:
// to its register operands while they are not ready, to the memory order (the
// LSU) while only that holds it, and to busy resources once it is ready.
void TraceListener::onCycleEnd() {
  for (const auto &[Index, IS] : Waiting) {
    const TraceEntry &T = Out.timeline[Index];
    if (Cycle <= T.dispatched) continue;
    if (T.ready >= 0)
      wait(Index, "resource");
    else
      wait(Index, IS->isMemOp() && IS->isReady() ? "memory" : "register");
  }
  if (Resources || Registers || Memory) {
    ++Out.pressure_cycles;
    Out.resource_pressure_cycles += Resources;
    Out.register_pressure_cycles += Registers;
    Out.memory_pressure_cycles += Memory;
  }
  Resources = Registers = Memory = false;
  ++Cycle;
}

void TraceListener::finish() {
  const unsigned Executions = LastIteration + 1;
  const size_t U = Out.units.size();
  Out.pressure.assign(BlockSize + 1, std::vector<double>(U, 0.0));
  for (size_t I = 0; I <= BlockSize; ++I)
    for (size_t J = 0; J < U; ++J) Out.pressure[I][J] = double(Usage[I * U + J]) / Executions;
}

}  // namespace dt

// Simulation: a block lowered under a compiled table and run through llvm-mca's
// default pipeline, many (block, table) pairs at a time.
#include "engine_impl.h"
#include "dtlb_miss.h"
#include "forwarded_load.h"
#include "front_end.h"
#include "memory_unit.h"
#include "move_elimination.h"
#include "output_dependency.h"
#include "partial_register.h"
#include "pointer_chasing.h"
#include "monitor_stage.h"
#include "serialising.h"
#include "stack_engine.h"
#include "trace_listener.h"

#include "llvm/MCA/Context.h"
#include "llvm/MCA/CustomBehaviour.h"
#include "llvm/MCA/InstrBuilder.h"
#include "llvm/MCA/Pipeline.h"
#include "llvm/MCA/SourceMgr.h"
#include "llvm/MCA/Stages/DispatchStage.h"
#include "llvm/MCA/Stages/ExecuteStage.h"
#include "llvm/MCA/Stages/RetireStage.h"

#include <atomic>
#include <climits>
#include <cmath>
#include <thread>

using namespace llvm;

namespace dt {
namespace {

constexpr unsigned kCallLatency = 100;  // llvm-mca's -call-latency default

#if LLVM_VERSION_MAJOR >= 19
using CircularSourceMgr = mca::CircularSourceMgr;
#else
using CircularSourceMgr = mca::SourceMgr;
#endif

std::string errorText(Error E) {
  std::string S;
  handleAllErrors(std::move(E), [&](const ErrorInfoBase &EI) { S = EI.message(); });
  return S;
}

// Turns a block's MCInsts into mca instructions under one subtarget. The
// instructions point into descriptors that the InstrBuilder owns, so a
// Lowering must outlive the simulation of what it lowered.
class Lowering {
#if LLVM_VERSION_MAJOR >= 19
  std::unique_ptr<mca::InstrumentManager> IM;
#endif
  std::unique_ptr<mca::InstrBuilder> IB;
  std::unique_ptr<mca::InstrPostProcess> IPP;

 public:
  Lowering(const EngineImpl &E, const MCSubtargetInfo &STI) {
#if LLVM_VERSION_MAJOR >= 19
    IM.reset(E.TheTarget->createInstrumentManager(STI, *E.MCII));
    if (!IM) IM = std::make_unique<mca::InstrumentManager>(STI, *E.MCII);
    IB = std::make_unique<mca::InstrBuilder>(STI, *E.MCII, *E.MRI, E.MCIA.get(), *IM,
                                             kCallLatency);
#else
    IB = std::make_unique<mca::InstrBuilder>(STI, *E.MCII, *E.MRI, E.MCIA.get());
#endif
    IPP.reset(E.TheTarget->createInstrPostProcess(STI, *E.MCII));
    if (!IPP) IPP = std::make_unique<mca::InstrPostProcess>(STI, *E.MCII);
  }

  // Appends B's instructions to Out; "" or why one could not be lowered.
  std::string lower(const BlockImpl &B, SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Out) {
#if LLVM_VERSION_MAJOR >= 19
    const SmallVector<mca::Instrument *> NoInstruments;
#endif
    for (size_t I = 0; I < B.Insts.size(); ++I) {
#if LLVM_VERSION_MAJOR >= 19
      auto Inst = IB->createInstruction(B.Insts[I], NoInstruments);
#else
      auto Inst = IB->createInstruction(B.Insts[I]);
#endif
      if (!Inst) return errorText(Inst.takeError()) + ": " + B.Text[I];
      IPP->postProcessInstruction(Inst.get(), B.Insts[I]);
      Out.emplace_back(std::move(Inst.get()));
    }
    return "";
  }
};

// llvm-mca's default pipeline with its defaults (no extra limits, loads and
// stores never alias).
std::unique_ptr<mca::Pipeline> defaultPipeline(mca::Context &Ctx, mca::SourceMgr &S,
                                               mca::CustomBehaviour &CB, bool BottleneckAnalysis) {
  mca::PipelineOptions PO(/*UOPQSize=*/0, /*DecThr=*/0, /*DW=*/0, /*RFS=*/0, /*LQS=*/0,
                          /*SQS=*/0, /*NoAlias=*/true, BottleneckAnalysis);
  return Ctx.createDefaultPipeline(PO, S, CB);
}

// The extended model: llvm-mca's hardware units and stages, assembled as
// Context::createDefaultPipeline does, with the front end in place of the entry
// stage and, when memory dependencies are on, their load/store unit.
std::unique_ptr<mca::Pipeline> extendedPipeline(mca::Context &Ctx, const MCSubtargetInfo &STI,
                                                const MCRegisterInfo &MRI, const TableImpl &T,
                                                const BlockImpl &B, mca::SourceMgr &S,
                                                std::vector<FrontEndInstr> Facts,
                                                bool BottleneckAnalysis) {
  const MCSchedModel &SM = STI.getSchedModel();
  const Globals &G = T.G;
  auto RCU = std::make_unique<mca::RetireControlUnit>(SM);
  auto PRF = std::make_unique<mca::RegisterFile>(SM, MRI, 0);
  std::unique_ptr<mca::LSUnitBase> LSU;
  const MemoryUnit *Memory = nullptr;
  if (G.on("memory") && (B.Memory || G.on("folded_load"))) {  // a folded load's load needs this unit
    std::shared_ptr<const MemoryMap> Map = B.Memory;
    if (!Map) {  // no accesses recorded: none meet
      auto None = std::make_shared<MemoryMap>();
      None->ByInstr.resize(B.Insts.size());
      Map = std::move(None);
    }
    std::vector<FoldedLoad> Folded = G.on("folded_load") ? foldedLoads(*T.Engine, T, B) : std::vector<FoldedLoad>();
    std::vector<std::vector<unsigned>> AddressOps;
    if (G.on("memory_ordering"))
      for (const MCInst &MI : B.Insts) AddressOps.push_back(addressOperands(T.Engine->MCII->get(MI.getOpcode())));
    auto M = std::make_unique<MemoryUnit>(SM, std::move(Map), B.Insts.size(), G, std::move(Folded),
                                          std::move(AddressOps));
    Memory = M.get();
    LSU = std::move(M);
  } else {
    LSU = std::make_unique<mca::LSUnit>(SM, 0, 0, /*AssumeNoAlias=*/true);
  }
  auto HWS = std::make_unique<mca::Scheduler>(SM, *LSU);
  FrontEndParams P = frontEndParams(G, SM);
  if (G.on("move_elimination")) P.RenamesPerCycle = renamesPerCycle(G);
  auto P0 = std::make_unique<mca::Pipeline>();
  P0->appendStage(std::make_unique<FrontEndStage>(S, std::move(Facts), P, Memory));
  P0->appendStage(std::make_unique<mca::DispatchStage>(STI, MRI, 0, *RCU, *PRF));
  P0->appendStage(std::make_unique<mca::ExecuteStage>(*HWS, BottleneckAnalysis));
  P0->appendStage(std::make_unique<mca::RetireStage>(*RCU, *PRF, *LSU));
  Ctx.addHardwareUnit(std::move(RCU));
  Ctx.addHardwareUnit(std::move(PRF));
  Ctx.addHardwareUnit(std::move(LSU));
  Ctx.addHardwareUnit(std::move(HWS));
  return P0;
}

struct Simulated {
  int64_t Cycles = -1;   // llvm-mca's Total Cycles
  double Steady = NAN;   // cycles per 100 iterations in steady state
  std::string Status;    // "ok" or a reason
  bool Settled = true;   // the cycles between iterations repeated
};

Simulated runOnce(const EngineImpl &E, const BlockImpl &B, const TableImpl &T,
                  unsigned Iterations, uint64_t Cap, bool FastForward,
                  Trace *Recorded = nullptr, unsigned Shown = 0) {
  if (!B.Error.empty()) return {-1, NAN, "bad block: " + B.Error};
  const MCSubtargetInfo &STI = *T.STI;
  Lowering L(E, STI);
  SmallVector<std::unique_ptr<mca::Instruction>> Lowered;
  if (std::string Why = L.lower(B, Lowered); !Why.empty()) return {-1, NAN, Why};
  const Globals &G = T.G;
  const bool Extended = G.any();
  std::vector<FrontEndInstr> Facts;
  std::vector<std::unique_ptr<mca::WriteDescriptor>> SyncedWrites;  // outlive the pipeline below
  std::vector<std::unique_ptr<mca::ReadDescriptor>> MergeReads;     // the same
  RenamedMoves Renamed;                                             // the same
  if (Extended) {
    const std::vector<unsigned> Sync = G.on("stack_engine") ? applyStackEngine(E, B, Lowered, G, SyncedWrites)
                                                            : std::vector<unsigned>();
    Facts = frontEndFacts(E, B, Lowered, G.on("front_end"), G.on("complex_decoder"));
    if (G.on("move_elimination")) {
      const std::vector<const mca::Instruction *> Executed = renameMoves(E, B, Lowered, Renamed);
      for (size_t I = 0; I < Executed.size(); ++I) Facts[I].Executed = Executed[I];
    }
    if (G.on("partial_register")) mergePartialWrites(E, Lowered, MergeReads);
    if (G.on("output_dependency")) readDestinations(E, B, Lowered, MergeReads);
    if (G.on("pointer_chasing")) shortenPointerChases(E, B, Lowered, G, SyncedWrites);
    if (G.on("forwarded_load")) timeForwardedLoads(B, Lowered, G, SyncedWrites);
    if (G.on("dtlb_miss")) timeDtlbMisses(B, Lowered, G, SyncedWrites);
    for (size_t I = 0; I < Sync.size(); ++I) Facts[I].SyncUops = Sync[I];
    const std::vector<int> Drains = serialisingDrains(E, B, G);
    for (size_t I = 0; I < Drains.size(); ++I)
      if (Drains[I] >= 0) {
        Facts[I].Drain = true;
        Facts[I].DrainCycles += (unsigned)Drains[I];
      }
    if (G.on("locked")) {
      // A prefix LLVM disassembles as an instruction of its own (LOCK_PREFIX, a
      // 100-cycle row) is part of the locked instruction after it: no execution.
      for (size_t I = 0; I < B.Insts.size(); ++I)
        if (E.MCII->getName(B.Insts[I].getOpcode()) == "LOCK_PREFIX") Lowered[I]->setEliminated();
    }
    // A macro-fused jcc executes as part of the µop before it: it takes no port.
    for (size_t I = 1; I < Facts.size(); ++I)
      if (Facts[I - 1].FusesWithNext) Lowered[I]->setEliminated();
  }
  CircularSourceMgr S(Lowered, Iterations);
  std::unique_ptr<mca::CustomBehaviour> CB(E.TheTarget->createCustomBehaviour(STI, S, *E.MCII));
  if (!CB) CB = std::make_unique<mca::CustomBehaviour>(STI, S, *E.MCII);
  mca::Context Ctx(*E.MRI, STI);
  auto Monitor = std::make_unique<MonitorStage>(Cap, Lowered.size(), Iterations, FastForward);
  const MonitorStage &M = *Monitor;
  std::unique_ptr<TraceListener> Tracer;
  if (Recorded)
    Tracer = std::make_unique<TraceListener>(STI.getSchedModel(), Lowered.size(),
                                             Lowered.size() * std::min(Shown, Iterations),
                                             *Recorded);
  auto P = Extended ? extendedPipeline(Ctx, STI, *E.MRI, T, B, S, std::move(Facts), Tracer != nullptr)
                    : defaultPipeline(Ctx, S, *CB, Tracer != nullptr);
  if (Tracer) P->addEventListener(Tracer.get());
  P->addEventListener(Monitor.get());
  P->appendStage(std::move(Monitor));
  Expected<unsigned> Cycles = P->run();
  if (Tracer) Tracer->finish();
  // BHive's figures sit under the steady state by a constant (mechanisms.py,
  // "Harness offset"): the steady state as the harness reports it.
  const int Offset = Extended && G.on("harness_offset") ? G.param("harness_offset_cycles") : 0;
  if (!Cycles) {
    std::string Why = errorText(Cycles.takeError());
    if (M.Extrapolated >= 0) return {M.Extrapolated, M.steady().PerHundred - Offset, "ok"};
    return {-1, NAN, Why};
  }
  const MonitorStage::Steady Measured = M.steady();
  return {(int64_t)*Cycles, Measured.PerHundred - Offset, "ok", Measured.Repeated};
}

// Runs the block; a run whose cycles between iterations never repeated (a fill
// still going on, a page walk every few dozen iterations) takes its steady state
// from a run kSettleRuns times as long, as BHive's two unroll counts would
// average it: its Total Cycles stay the requested run's. Not when that run would
// pass the cycle cap (the cap bounds a pair's work), nor past the iterations an
// unsigned counts.
constexpr unsigned kSettleRuns = 2;
Simulated simulateOne(const EngineImpl &E, const BlockImpl &B, const TableImpl &T,
                      unsigned Iterations, uint64_t Cap, bool FastForward,
                      Trace *Recorded = nullptr, unsigned Shown = 0) {
  Simulated R = runOnce(E, B, T, Iterations, Cap, FastForward, Recorded, Shown);
  if (R.Settled || R.Status != "ok") return R;
  if ((uint64_t)R.Cycles > Cap / kSettleRuns || Iterations > UINT_MAX / kSettleRuns) return R;
  const Simulated Longer = runOnce(E, B, T, kSettleRuns * Iterations, Cap, FastForward);
  if (Longer.Status == "ok") R.Steady = Longer.Steady;
  return R;
}

}  // namespace

Trace Engine::trace(const Block &block, const Table &table, unsigned iterations, unsigned shown,
                    uint64_t cycle_cap) const {
  if (iterations == 0) throw std::invalid_argument("iterations must be at least 1");
  if (!block.impl || block.impl->Engine != impl_) throw std::invalid_argument("block from another engine");
  if (!table.impl || table.impl->Engine != impl_) throw std::invalid_argument("table from another engine");
  Trace Out;
  try {
    Simulated R = simulateOne(*impl_, *block.impl, *table.impl, iterations, cycle_cap,
                              /*FastForward=*/false, &Out, shown);
    Out.cycles = R.Cycles, Out.steady = R.Steady, Out.status = std::move(R.Status);
  } catch (const std::exception &X) {
    Out.cycles = -1;
    Out.steady = NAN;
    Out.status = std::string("engine error: ") + X.what();
  }
  return Out;
}

SimResult Engine::simulate(const std::vector<Block> &blocks, const std::vector<Table> &tables,
                           const std::vector<int64_t> &block_idx,
                           const std::vector<int64_t> &table_idx, unsigned iterations,
                           unsigned threads, uint64_t cycle_cap, bool fast_forward) const {
  if (block_idx.size() != table_idx.size())
    throw std::invalid_argument("block_idx and table_idx differ in length");
  if (iterations == 0) throw std::invalid_argument("iterations must be at least 1");
  for (const Block &B : blocks)
    if (!B.impl || B.impl->Engine != impl_) throw std::invalid_argument("block from another engine");
  for (const Table &T : tables)
    if (!T.impl || T.impl->Engine != impl_) throw std::invalid_argument("table from another engine");
  const size_t N = block_idx.size();
  for (size_t I = 0; I < N; ++I)
    if (block_idx[I] < 0 || (size_t)block_idx[I] >= blocks.size() || table_idx[I] < 0 ||
        (size_t)table_idx[I] >= tables.size())
      throw std::out_of_range("pair " + std::to_string(I) + " indexes past the blocks or tables");
  SimResult Out{std::vector<int64_t>(N, -1), std::vector<double>(N, NAN), std::vector<std::string>(N)};
  std::atomic<size_t> Next{0};
  auto Work = [&] {
    for (size_t I; (I = Next++) < N;) {
      try {
        Simulated R = simulateOne(*impl_, *blocks[block_idx[I]].impl, *tables[table_idx[I]].impl,
                                  iterations, cycle_cap, fast_forward);
        Out.cycles[I] = R.Cycles;
        Out.steady[I] = R.Steady;
        Out.status[I] = std::move(R.Status);
      } catch (const std::exception &X) {
        Out.status[I] = std::string("engine error: ") + X.what();
      }
    }
  };
  threads = std::max(1u, std::min<unsigned>(threads, N ? N : 1));
  std::vector<std::thread> Pool;
  for (unsigned I = 1; I < threads; ++I) Pool.emplace_back(Work);
  Work();
  for (auto &Th : Pool) Th.join();
  return Out;
}

}  // namespace dt

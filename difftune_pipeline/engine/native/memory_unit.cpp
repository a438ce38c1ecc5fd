#include "memory_unit.h"

#include <algorithm>

using namespace llvm;

namespace dt {

MemoryUnit::MemoryUnit(const MCSchedModel &SM, std::shared_ptr<const MemoryMap> Accesses, unsigned BlockSize,
                       const Globals &G, std::vector<FoldedLoad> Folded,
                       std::vector<std::vector<unsigned>> AddressOps)
    : LSUnitBase(SM, 0, 0, /*AssumeNoAlias=*/true), Owned(std::move(Accesses)), Map(*Owned), BlockSize(BlockSize),
      ForwardDelay(G.param("store_forward_latency")), AliasDelay(G.param("alias_4k_penalty")),
      FailDelay(G.param("store_forward_fail_penalty")),
      BankDelay(G.on("bank_conflict") ? G.param("bank_conflict_penalty") : 0),
      WalkDelay(G.on("page_walk") ? G.param("page_walk_penalty") : 0),
      PhysicalAlias(G.on("physical_alias") && Map.OnePage),
      PhysicalDelay(PhysicalAlias ? G.param("physical_alias_penalty") : 0), Ordering(G.on("memory_ordering")),
      OrderingDelay(Ordering ? G.param("memory_ordering_penalty") : 0), AddressOps(std::move(AddressOps)),
      Folded(std::move(Folded)) {
  for (const auto &ByIteration : Map.ByInstr) {
    const size_t N = ByIteration.size() >= 2 ? ByIteration[0].size() : 0;
    std::vector<bool> Steady(N, true);
    for (size_t J = 0; J < N; ++J) {
      const int64_t Stride = ByIteration[1].size() == N ? ByIteration[1][J].address - ByIteration[0][J].address : 0;
      Steady[J] = Stride != 0 && Stride > -kPage && Stride < kPage;
      for (size_t K = 1; K < ByIteration.size() && Steady[J]; ++K)
        Steady[J] = ByIteration[K].size() == N &&
                    (int64_t)(ByIteration[K][J].address - ByIteration[K - 1][J].address) == Stride;
    }
    Strided.push_back(std::move(Steady));
  }
}
namespace {

// 4K aliasing: the low 12 bits of the two accesses overlap while the addresses do not.
bool alias4k(const Access &X, const Access &Y) {
  return !overlap(X.address, X.size, Y.address, Y.size) &&
         overlap(X.address & 0xfff, X.size, Y.address & 0xfff, Y.size);
}

// The L1 banks (address bits 2-5) an access reads, as a mask of 16.
unsigned banks(const Access &A) {
  unsigned Mask = 0;
  for (uint64_t Word = A.address >> 2; Word <= (A.address + A.size - 1) >> 2 && Mask != 0xffff; ++Word)
    Mask |= 1u << (Word & 15);
  return Mask;
}

// Two loads conflict in the L1 when they read one bank of two different sets (bits 6-12).
bool bankConflict(const Access &X, const Access &Y) {
  return ((X.address >> 6) & 0x7f) != ((Y.address >> 6) & 0x7f) && (banks(X) & banks(Y));
}

}  // namespace

// The accesses of one dynamic instruction.
std::vector<Access> MemoryUnit::accessesOf(unsigned SourceIndex) const {
  return accessesAt(Map, SourceIndex % BlockSize, SourceIndex / BlockSize);
}

// Whether one of the accesses of a stream that advances by less than a page an
// iteration is the run's first to a page (both ends of the access count).
bool MemoryUnit::firstTouch(const std::vector<Access> &Mine, unsigned SourceIndex) {
  const std::vector<bool> &Steady = Strided[SourceIndex % BlockSize];
  bool First = false;
  for (size_t J = 0; J < Mine.size() && J < Steady.size(); ++J) {
    if (!Steady[J]) continue;
    First |= Touched.insert(Mine[J].address / kPage).second;
    First |= Touched.insert((Mine[J].address + Mine[J].size - 1) / kPage).second;
  }
  return First;
}

mca::LSUnitBase::Status MemoryUnit::isAvailable(const mca::InstRef &IR) const {
  const mca::Instruction &IS = *IR.getInstruction();
  if (IS.getMayLoad() && isLQFull()) return LSU_LQUEUE_FULL;
  if (IS.getMayStore() && isSQFull()) return LSU_SQUEUE_FULL;
  return LSU_AVAILABLE;
}

unsigned MemoryUnit::standIn() {
  const unsigned G = createMemoryGroup();
  getGroup(G).addInstruction();
  return G;
}

MemoryUnit::Store *MemoryUnit::storeOf(unsigned Group) {
  for (Store &S : Stores)
    if (S.Group == Group) return &S;
  return nullptr;
}

MemoryUnit::Load *MemoryUnit::loadOf(unsigned Group) {
  for (Load &L : Loads)
    if (L.Group == Group) return &L;
  return nullptr;
}

// A load waits for every older load in flight that reads one of its banks in
// another set, and is recorded for the younger ones.
void MemoryUnit::waitForBanks(const std::vector<Access> &Mine, unsigned G, std::vector<unsigned> Feeds,
                              const mca::InstRef &IR) {
  Loads.erase(std::remove_if(Loads.begin(), Loads.end(), [&](const Load &L) { return !isValidGroupID(L.Bank); }),
              Loads.end());
  for (const Load &Older : Loads) {
    if (Older.Inst->isDispatched() || Older.Inst->isPending() ||
        std::any_of(Older.Feeds.begin(), Older.Feeds.end(), [&](unsigned F) { return isValidGroupID(F); }))
      continue;
    bool Conflict = false;
    for (const Access &X : Mine)
      for (const Access &Y : Older.Reads) Conflict |= !X.store && bankConflict(X, Y);
    if (Conflict) getGroup(Older.Bank).addSuccessor(&getGroup(G), true);
  }
  std::vector<Access> Reads;
  for (const Access &A : Mine)
    if (!A.store) Reads.push_back(A);
  if (!Reads.empty())
    Loads.push_back({G, standIn(), IR.getSourceIndex(), IR.getInstruction(), std::move(Reads), std::move(Feeds)});
}

unsigned MemoryUnit::dispatch(const mca::InstRef &IR) {
  const mca::Instruction &IS = *IR.getInstruction();
  if (IS.getMayLoad()) acquireLQSlot();
  if (IS.getMayStore()) acquireSQSlot();
  const unsigned G = createMemoryGroup();
  mca::MemoryGroup &Group = getGroup(G);
  Group.addInstruction();
  // Stores whose stand-ins have all completed constrain nothing any more.
  while (!Stores.empty() && !waitedFor(Stores.front())) Stores.pop_front();
  const std::vector<Access> Mine = accessesOf(IR.getSourceIndex());
  if (IS.getMayLoad()) {
    // Each load access reads from the youngest older store that writes any of its
    // bytes (forwarded when one access of that store holds them all); older
    // stores to those bytes are superseded (a failed forward waits for the
    // youngest to retire, and the older ones retire before it).
    std::vector<bool> Served(Mine.size());
    std::vector<unsigned> Feeds;
    const Store *Read = nullptr;  // the youngest store it reads from
    for (auto S = Stores.rbegin(); S != Stores.rend(); ++S) {
      bool Forward = false, Fail = false, Alias = false, Physical = false;
      for (size_t I = 0; I < Mine.size(); ++I) {
        const Access &L = Mine[I];
        if (L.store || Served[I]) continue;
        bool Reads = false, Whole = false, Aliases = false;
        for (const Access &W : S->Bytes)
          if (W.store) {
            Reads |= overlap(L.address, L.size, W.address, W.size);
            Whole |= contains(W, L);
            Aliases |= Map.Exact && alias4k(L, W);
          }
        // On one physical page a 4K alias is the store's own bytes under another
        // virtual address: the load reads them, and older stores no longer matter.
        Physical |= PhysicalAlias && Aliases && !Reads;
        Alias |= Aliases;
        Served[I] = Reads || (PhysicalAlias && Aliases);
        Forward |= Reads && Whole;
        Fail |= Reads && !Whole;
      }
      if ((Forward || Fail) && !Read) Read = &*S;
      // A failed forward and a physical alias each hold the load until the store
      // retires, by their own penalties; a forward or a 4K alias alone, by theirs.
      const unsigned Waits[] = {Fail ? S->Fail : 0u, Physical ? S->Alias : 0u,
                                Fail || Physical ? 0u
                                : Forward        ? S->Forward
                                : Alias          ? S->Alias
                                                 : 0u};
      for (const unsigned From : Waits)
        if (From && isValidGroupID(From)) {
          getGroup(From).addSuccessor(&Group, true);
          Feeds.push_back(From);
        }
    }
    if (Ordering && Read && !Read->Issued) {
      const unsigned S = standIn();
      getGroup(S).addSuccessor(&Group, true);
      Feeds.push_back(S);  // waited for as a store's data is: by a folded load's load, by bank conflicts
      Overtakes.push_back({IR.getInstruction(), Read->Inst, Read->Group, S, IR.getSourceIndex(), Read->SourceIndex});
    }
    if (const FoldedLoad *F = Folded.empty() ? nullptr : &Folded[IR.getSourceIndex() % BlockSize]; F && F->Cycles) {
      const unsigned S = standIn();
      getGroup(S).addSuccessor(&Group, true);
      Folds.push_back({S, IR.getSourceIndex(), F->Cycles, IR.getInstruction(), Feeds, F->AddressOps});
    }
    if (BankDelay && Map.Exact) waitForBanks(Mine, G, std::move(Feeds), IR);
  }
  if (IS.getMayStore())
    Stores.push_back(
        {G, standIn(), standIn(), standIn(), IR.getSourceIndex(), Mine, IR.getInstruction()});
  if (WalkDelay && Map.Exact) {
    Walks.erase(std::remove_if(Walks.begin(), Walks.end(), [&](const Walk &W) { return !isValidGroupID(W.StandIn); }),
                Walks.end());
    for (const Walk &W : Walks) getGroup(W.StandIn).addSuccessor(&Group, true);
    if (firstTouch(Mine, IR.getSourceIndex())) Walks.push_back({G, standIn(), IR.getSourceIndex()});
  }
  return G;
}

// The scheduler reports every instruction; only memory operations have groups.
void MemoryUnit::onInstructionIssued(const mca::InstRef &IR) {
  if (!IR.getInstruction()->isMemOp()) return;
  LSUnitBase::onInstructionIssued(IR);
  if (Store *S = storeOf(IR.getInstruction()->getLSUTokenID())) {
    for (unsigned G : {S->Forward, S->Alias, S->Fail}) getGroup(G).onInstructionIssued(IR);
    // forwarded once its data is ready: a store that loads nothing (a
    // register, an immediate) the cycle after it issues, whatever latency its
    // description gives it (a push's counts its stack update); a
    // read-modify-write's in its last cycle, after its load and operation
    const mca::Instruction &I = *IR.getInstruction();
    const int Ready = I.getMayLoad() ? std::max(I.getCyclesLeft() - 1, 1) : 1;
    schedule(S->Forward, unsigned(Ready) + ForwardDelay, IR.getSourceIndex());
    S->Issued = true;
    // a load that ran ahead of it is issued again once its data is ready; one the
    // watch has not seen ahead (both addresses resolved this cycle, or the load's
    // not yet) only waits for the data
    for (Overtake &O : Overtakes)
      if (O.Load && O.StoreGroup == S->Group) {
        getGroup(O.StandIn).onInstructionIssued(IR);
        schedule(O.StandIn, unsigned(Ready) + ForwardDelay + (O.Ahead ? OrderingDelay : 0), IR.getSourceIndex());
        O.Load = nullptr;
      }
  }
  if (Load *L = loadOf(IR.getInstruction()->getLSUTokenID())) {
    getGroup(L->Bank).onInstructionIssued(IR);
    schedule(L->Bank, BankDelay, IR.getSourceIndex());
  }
  for (const Walk &W : Walks)
    if (W.Group == IR.getInstruction()->getLSUTokenID()) {
      getGroup(W.StandIn).onInstructionIssued(IR);
      schedule(W.StandIn, WalkDelay, IR.getSourceIndex());
    }
}

// A stand-in completes through the base class (which then forgets it), with
// the stand-in instruction carrying its token: the store may be gone by then.
void MemoryUnit::complete(unsigned Group, unsigned SourceIndex) {
  StandIn.setLSUTokenID(Group);
  LSUnitBase::onInstructionExecuted(mca::InstRef(SourceIndex, &StandIn));
}

void MemoryUnit::onInstructionExecuted(const mca::InstRef &IR) {
  if (!IR.getInstruction()->isMemOp()) return;
  const unsigned Token = IR.getInstruction()->getLSUTokenID();
  LSUnitBase::onInstructionExecuted(IR);
  // a 4K alias of another physical page is known once the store executes; on one
  // physical page the alias is the store's own bytes, read after it retires
  if (Store *S = storeOf(Token); S && !PhysicalAlias) schedule(S->Alias, AliasDelay, IR.getSourceIndex());
}

void MemoryUnit::onInstructionRetired(const mca::InstRef &IR) {
  const unsigned Token = IR.getInstruction()->getLSUTokenID();
  LSUnitBase::onInstructionRetired(IR);
  if (Store *S = storeOf(Token)) {
    schedule(S->Fail, FailDelay, IR.getSourceIndex());
    if (PhysicalAlias) schedule(S->Alias, PhysicalDelay, IR.getSourceIndex());
  }
}

void MemoryUnit::schedule(unsigned Group, unsigned Delay, unsigned SourceIndex) {
  if (Delay == 0)
    complete(Group, SourceIndex);
  else
    Pending.push_back({Cycle + Delay, Group, SourceIndex});
}

bool MemoryUnit::waitedFor(const Store &S) const {
  return isValidGroupID(S.Forward) || isValidGroupID(S.Alias) || isValidGroupID(S.Fail);
}

unsigned MemoryUnit::oldestReferenced() const {
  unsigned Oldest = ~0u;
  for (const Store &S : Stores)
    if (waitedFor(S)) {
      Oldest = S.SourceIndex;
      break;
    }
  for (const Load &L : Loads)
    if (isValidGroupID(L.Bank)) Oldest = std::min(Oldest, L.SourceIndex);
  for (const Walk &W : Walks)
    if (isValidGroupID(W.StandIn)) Oldest = std::min(Oldest, W.SourceIndex);
  return Oldest;
}

// A folded load's load starts once its address registers are ready and its
// stores have forwarded (this cycle, as the stand-ins complete first). The
// scheduler updates register reads after this unit's cycle event: registers
// found ready at the first check may have been so since dispatch, and then the
// load starts now; found ready at a later check, with the stores done before,
// they became ready last cycle, and so did the load.
void MemoryUnit::startFoldedLoads() {
  for (Fold &F : Folds) {
    const bool FeedsDone =
        std::none_of(F.Feeds.begin(), F.Feeds.end(), [&](unsigned G) { return isValidGroupID(G); });
    bool Ready = FeedsDone;
    for (const mca::ReadState &R : F.Inst->getUses())
      if (llvm::is_contained(F.AddressOps, R.getDescriptor().OpIndex)) Ready = Ready && R.isReady();
    if (Ready) {
      getGroup(F.StandIn).onInstructionIssued(mca::InstRef(F.SourceIndex, const_cast<mca::Instruction *>(F.Inst)));
      schedule(F.StandIn, F.FeedsDone ? F.Cycles - 1 : F.Cycles, F.SourceIndex);
      F.Inst = nullptr;
    }
    F.FeedsDone = FeedsDone;
  }
  Folds.erase(std::remove_if(Folds.begin(), Folds.end(), [](const Fold &F) { return !F.Inst; }), Folds.end());
}

// Whether the registers an instruction's address is computed from are ready
// (true for one whose address is implicit: a push's, a pop's).
bool MemoryUnit::addressReady(const mca::Instruction &I, unsigned SourceIndex) const {
  const std::vector<unsigned> &Ops = AddressOps[SourceIndex % BlockSize];
  return std::all_of(I.getUses().begin(), I.getUses().end(), [&](const mca::ReadState &R) {
    return !llvm::is_contained(Ops, R.getDescriptor().OpIndex) || R.isReady();
  });
}

// A watched load runs ahead of its store when its address is ready while the
// store's is not; where the store's address is ready no later than the load's,
// the load only waits for the store's data, as any load does, and its stand-in
// completes now. Both are read at the same point of the cycle.
void MemoryUnit::watchOvertakes() {
  for (Overtake &O : Overtakes) {
    if (!O.Load || O.Ahead) continue;
    const bool LoadReady = addressReady(*O.Load, O.LoadIndex), StoreReady = addressReady(*O.Store, O.StoreIndex);
    O.Ahead = LoadReady && !StoreReady;
    if (StoreReady && !O.Ahead) {
      getGroup(O.StandIn).onInstructionIssued(mca::InstRef(O.LoadIndex, const_cast<mca::Instruction *>(O.Load)));
      complete(O.StandIn, O.LoadIndex);
      O.Load = nullptr;
    }
  }
  Overtakes.erase(std::remove_if(Overtakes.begin(), Overtakes.end(), [](const Overtake &O) { return !O.Load; }),
                  Overtakes.end());
}

void MemoryUnit::cycleEvent() {
  ++Cycle;
  for (size_t I = 0; I < Pending.size();) {
    if (Pending[I].Cycle <= Cycle) {
      complete(Pending[I].Group, Pending[I].SourceIndex);
      Pending[I] = Pending.back();
      Pending.pop_back();
    } else {
      ++I;
    }
  }
  startFoldedLoads();
  if (Ordering) watchOvertakes();
  LSUnitBase::cycleEvent();
}

}  // namespace dt

// The extended model's load/store unit: an LSUnitBase in which a load waits for
// the youngest older store that writes bytes it reads, at the addresses a harness model
// recorded: forwarded once the store's data is ready (a plain store's the cycle
// after it issues, a read-modify-write's in its last cycle) when one store access
// holds all the bytes the load reads there, or else after the store retires (a
// failed forward); a load whose address only 4K-aliases an older store's waits too
// (with physical_alias, on a harness that backs every page with one physical page,
// as BHive's does, until PhysicalDelay cycles after the store retires: the alias is
// the store's own bytes under another virtual address, which the store buffer does
// not forward). Nothing else
// orders memory operations: a load waits for no store it does not touch, and
// stores execute when their operands are ready (they commit in order anyway).
// On Sandy and Ivy Bridge (bank_conflict) two loads of one L1 bank (address bits
// 2-5) in different sets (bits 6-12) do not issue together: the younger waits
// BankDelay cycles after the older issues (Intel's optimization manual, "L1D
// cache bank conflicts"; with real addresses only). Only an older load whose
// operands are ready and that waits for no store holds a younger one: one still
// waiting issues later anyway, and waiting for it would chain loads that the
// hardware issues apart.
// With page_walk, an access of a stream that advances by less than a page an
// iteration (its recorded addresses keep one stride: a pointer the block steps,
// an epilogue's stack adjustment) that is the run's first to a 4 KiB page walks
// the page tables: no younger memory operation issues until WalkDelay cycles
// after it issues. BHive's harness backs every page with one physical page, but
// each virtual page a block sweeps through still needs its own translation.
// Streams that jump a page or more an iteration, and addresses computed from
// values, are not charged here: BHive's measurements of them show a smaller and
// varying cost (docs/model.md); a load that a loaded value moves to a new page
// every iteration is timed by dtlb_miss.h.
// With memory_ordering, a load that reads bytes of an older store whose address
// is not known yet runs ahead of it when its own address is known first: once
// the store's address resolves, the overlap is found, and the load is issued
// again (a memory-ordering machine clear, Intel's optimization manual); its data
// comes OrderingDelay cycles after the store's is ready. A load whose address
// comes no sooner than the store's waits for the store as any other load does.
// BHive's harness loads one value through every pointer, so a store through a
// pointer the block loads often meets a later load of the same iteration.
// With folded_load, a folded load (folded_load.h) waits for a stand-in that
// completes its load's cycles after its address registers are ready and the
// stores it reads from have forwarded: its operation, timed by the table without
// those cycles, starts once both the loaded value and its register operands are there.
#pragma once

#include "engine_impl.h"
#include "folded_load.h"

#include "llvm/MCA/HardwareUnits/LSUnit.h"

#include <deque>
#include <unordered_set>

namespace dt {

class MemoryUnit final : public llvm::mca::LSUnitBase {
  // A store in flight, and the stand-in groups through which loads wait for it:
  // each "executes" its delay after the store's data is ready (Alias: after it
  // executes, or with PhysicalAlias after it retires; Fail: after it retires).
  struct Store {
    unsigned Group = 0, Forward = 0, Alias = 0, Fail = 0;  // its own group and its stand-ins
    unsigned SourceIndex = 0;
    std::vector<Access> Bytes;
    const llvm::mca::Instruction *Inst = nullptr;  // alive until it issues (Issued)
    bool Issued = false;
  };
  // A load that reads the youngest older store of its bytes before that store
  // has issued, watched (memory_ordering) until the store's address is known:
  // the load waits for StandIn, which completes at once when the store's address
  // came first, with the store's data when both came in one cycle, or
  // OrderingDelay cycles after the store's data when the load's came first.
  struct Overtake {
    const llvm::mca::Instruction *Load = nullptr, *Store = nullptr;  // Load null: settled
    unsigned StoreGroup = 0, StandIn = 0, LoadIndex = 0, StoreIndex = 0;
    bool Ahead = false;
  };
  // A load in flight, and the stand-in through which a younger load of its bank
  // waits for it: it completes BankDelay cycles after the load issues.
  struct Load {
    unsigned Group = 0, Bank = 0;
    unsigned SourceIndex = 0;
    const llvm::mca::Instruction *Inst = nullptr;  // alive while Bank is (oldestReferenced)
    std::vector<Access> Reads;
    std::vector<unsigned> Feeds;  // the store stand-ins it waits for
  };
  struct Due {
    uint64_t Cycle;
    unsigned Group, SourceIndex;
  };
  // A first touch of a page, and the stand-in every younger memory operation
  // waits for: it completes WalkDelay cycles after the access issues.
  struct Walk {
    unsigned Group = 0, StandIn = 0, SourceIndex = 0;
  };

  // A folded load's load in flight: the stand-in its instruction waits for.
  struct Fold {
    unsigned StandIn = 0, SourceIndex = 0, Cycles = 0;
    const llvm::mca::Instruction *Inst = nullptr;  // alive until its load starts (it cannot issue before)
    std::vector<unsigned> Feeds;             // the store stand-ins it reads through
    std::vector<unsigned> AddressOps;
    bool FeedsDone = false;                  // at the last check (none before the first)
  };

  const std::shared_ptr<const MemoryMap> Owned;
  const MemoryMap &Map;
  const unsigned BlockSize, ForwardDelay, AliasDelay, FailDelay, BankDelay, WalkDelay;
  const bool PhysicalAlias;  // physical_alias is on and the addresses share one physical page
  const unsigned PhysicalDelay;
  const bool Ordering;  // memory_ordering is on
  const unsigned OrderingDelay;
  const std::vector<std::vector<unsigned>> AddressOps;  // [instruction]: its address registers' MCInst operands
  std::vector<Overtake> Overtakes;
  std::vector<std::vector<bool>> Strided;  // [instruction][access]: its addresses keep one stride under a page
  std::unordered_set<uint64_t> Touched;    // pages accessed so far in the run
  std::vector<Walk> Walks;                 // walks whose stand-in has not completed
  std::deque<Store> Stores;
  std::vector<Load> Loads;  // loads whose bank stand-in has not completed
  std::vector<Due> Pending;
  std::vector<FoldedLoad> Folded;  // [instruction]
  std::vector<Fold> Folds;         // not started yet
  uint64_t Cycle = 0;
  llvm::mca::InstrDesc StandInDesc{};
  llvm::mca::Instruction StandIn{StandInDesc, 0};  // carries a stand-in's token when it completes

  std::vector<Access> accessesOf(unsigned SourceIndex) const;
  bool firstTouch(const std::vector<Access> &Mine, unsigned SourceIndex);
  Store *storeOf(unsigned Group);
  Load *loadOf(unsigned Group);
  void waitForBanks(const std::vector<Access> &Mine, unsigned G, std::vector<unsigned> Feeds,
                    const llvm::mca::InstRef &IR);
  bool waitedFor(const Store &S) const;  // a stand-in of S has not completed yet
  unsigned standIn();
  void complete(unsigned Group, unsigned SourceIndex);
  void schedule(unsigned Group, unsigned Delay, unsigned SourceIndex);
  void startFoldedLoads();
  bool addressReady(const llvm::mca::Instruction &I, unsigned SourceIndex) const;
  void watchOvertakes();

 public:
  // The delays are the table's memory parameters (and bank_conflict's and page_walk's, 0 when off).
  // Folded: each instruction's folded load (empty when folded_load is off);
  // AddressOps: each instruction's address operands (read with memory_ordering).
  MemoryUnit(const llvm::MCSchedModel &SM, std::shared_ptr<const MemoryMap> Accesses, unsigned BlockSize,
             const Globals &G, std::vector<FoldedLoad> Folded, std::vector<std::vector<unsigned>> AddressOps);
  Status isAvailable(const llvm::mca::InstRef &IR) const override;
  unsigned dispatch(const llvm::mca::InstRef &IR) override;
  void onInstructionIssued(const llvm::mca::InstRef &IR) override;
  void onInstructionExecuted(const llvm::mca::InstRef &IR) override;
  void onInstructionRetired(const llvm::mca::InstRef &IR) override;
  void cycleEvent() override;
  // The oldest instruction a stand-in may still read (a store or load whose
  // stand-ins have not completed): the front end keeps it and everything after it alive.
  unsigned oldestReferenced() const;
};

}  // namespace dt

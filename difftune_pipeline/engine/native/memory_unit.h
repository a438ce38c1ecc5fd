// The extended model's load/store unit: an LSUnitBase in which a load waits for
// the youngest older store that writes bytes it reads, at the addresses a harness model
// recorded: forwarded from the store when one store access holds all the bytes
// the load reads there, or else after the store retires (a failed forward); a
// load whose address only 4K-aliases an older store's waits too. Nothing else
// orders memory operations: a load waits for no store it does not touch, and
// stores execute when their operands are ready (they commit in order anyway).
// On Sandy and Ivy Bridge (bank_conflict) two loads of one L1 bank (address bits
// 2-5) in different sets (bits 6-12) do not issue together: the younger waits
// BankDelay cycles after the older issues (Intel's optimization manual, "L1D
// cache bank conflicts"; with real addresses only). Only an older load whose
// operands are ready and that waits for no store holds a younger one: one still
// waiting issues later anyway, and waiting for it would chain loads that the
// hardware issues apart.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/HardwareUnits/LSUnit.h"

#include <deque>

namespace dt {

class MemoryUnit final : public llvm::mca::LSUnitBase {
  // A store in flight, and the stand-in groups through which loads wait for it:
  // each "executes" its delay after the store executes (Fail: retires).
  struct Store {
    unsigned Group = 0, Forward = 0, Alias = 0, Fail = 0;  // its own group and its stand-ins
    unsigned SourceIndex = 0;
    std::vector<Access> Bytes;
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

  const MemoryMap &Map;
  const unsigned BlockSize, ForwardDelay, AliasDelay, FailDelay, BankDelay;
  std::deque<Store> Stores;
  std::vector<Load> Loads;  // loads whose bank stand-in has not completed
  std::vector<Due> Pending;
  uint64_t Cycle = 0;
  llvm::mca::InstrDesc StandInDesc{};
  llvm::mca::Instruction StandIn{StandInDesc, 0};  // carries a stand-in's token when it completes

  std::vector<Access> accessesOf(unsigned SourceIndex) const;
  Store *storeOf(unsigned Group);
  Load *loadOf(unsigned Group);
  void waitForBanks(const std::vector<Access> &Mine, unsigned G, std::vector<unsigned> Feeds,
                    const llvm::mca::InstRef &IR);
  bool waitedFor(const Store &S) const;  // a stand-in of S has not completed yet
  unsigned standIn();
  void complete(unsigned Group, unsigned SourceIndex);
  void schedule(unsigned Group, unsigned Delay, unsigned SourceIndex);

 public:
  // The delays are the table's memory parameters (and bank_conflict's, 0 when it is off).
  MemoryUnit(const llvm::MCSchedModel &SM, const MemoryMap &Map, unsigned BlockSize, const Globals &G);
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

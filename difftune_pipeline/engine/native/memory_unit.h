// The extended model's load/store unit: an LSUnitBase in which a load waits for
// every older store whose bytes it reads (store-to-load forwarding), or whose
// address it 4K-aliases, at the addresses a harness model recorded. Stores keep
// llvm-mca's order (issued after older loads and stores, as its LSUnit does
// with -noalias); a load waits for no store it does not touch.
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/HardwareUnits/LSUnit.h"

#include <deque>

namespace dt {

class MemoryUnit final : public llvm::mca::LSUnitBase {
  // A store in flight, and the stand-in groups through which loads wait for it:
  // each "executes" its delay after the store does.
  struct Store {
    unsigned Group = 0, Forward = 0, Alias = 0;  // its own group and its stand-ins
    unsigned SourceIndex = 0;
    std::vector<Access> Bytes;
  };
  struct Due {
    uint64_t Cycle;
    unsigned Group, SourceIndex;
  };

  const MemoryMap &Map;
  const unsigned BlockSize, ForwardDelay, AliasDelay;
  unsigned LastStore = 0, LastLoad = 0;  // group ids, as in llvm-mca's LSUnit
  std::deque<Store> Stores;
  std::vector<Due> Pending;
  uint64_t Cycle = 0;
  llvm::mca::InstrDesc StandInDesc{};
  llvm::mca::Instruction StandIn{StandInDesc, 0};  // carries a stand-in's token when it completes

  std::vector<Access> accessesOf(unsigned SourceIndex) const;
  Store *storeOf(unsigned Group);
  unsigned standIn();
  void complete(unsigned Group, unsigned SourceIndex);

 public:
  MemoryUnit(const llvm::MCSchedModel &SM, const MemoryMap &Map, unsigned BlockSize,
             unsigned ForwardDelay, unsigned AliasDelay)
      : LSUnitBase(SM, 0, 0, /*AssumeNoAlias=*/true), Map(Map), BlockSize(BlockSize),
        ForwardDelay(ForwardDelay), AliasDelay(AliasDelay) {}
  Status isAvailable(const llvm::mca::InstRef &IR) const override;
  unsigned dispatch(const llvm::mca::InstRef &IR) override;
  void onInstructionIssued(const llvm::mca::InstRef &IR) override;
  void onInstructionExecuted(const llvm::mca::InstRef &IR) override;
  void cycleEvent() override;
  // The oldest instruction a stand-in may still read (a store whose stand-ins
  // have not completed): the front end keeps it and everything after it alive.
  unsigned oldestReferenced() const;
};

}  // namespace dt

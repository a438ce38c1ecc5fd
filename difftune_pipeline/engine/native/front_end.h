// The extended model's front end: a Stage in place of MCA's EntryStage that
// predecodes a byte stream, decodes it with a limited set of decoders, fuses
// pairs (cmp+jcc) and load+op µops, and issues fused µops from a bounded queue
// at a fixed width (Intel's optimization manual, "legacy decode pipeline"); it
// also holds an instruction that drains the pipeline (serialising.h).
#pragma once

#include "engine_impl.h"

#include "llvm/MCA/Instruction.h"
#include "llvm/MCA/SourceMgr.h"
#include "llvm/MCA/Stages/Stage.h"

#include <deque>
#include <memory>

namespace dt {

// An instruction's memory operand, as micro-fusion, macro-fusion and the load
// pipeline's short path (pointer_chasing.h) read it.
struct MemOperand {
  bool Present = false, Indexed = false, RipRelative = false, Segmented = false;
  llvm::MCRegister Base;      // none: an absolute address
  bool ImmediateDisp = false;  // the displacement is a number (not a symbol)
  int64_t Disp = 0;
};
MemOperand memOperand(const EngineImpl &E, const llvm::MCInst &MI);

// What the front end knows of one instruction of the block.
struct FrontEndInstr {
  unsigned Bytes = 1;          // its length in machine code
  unsigned OpcodeAt = 0;       // where its nominal opcode byte starts, past prefixes and escapes
  unsigned Fused = 1;          // fused-domain µops it issues as (0: macro-fused into the one before)
  unsigned Decoded = 1;        // ... and the decoders see, before unlamination
  bool FusesWithNext = false;  // first half of a macro-fused pair: decoded with the next one
  bool LengthChanging = false; // a length-changing prefix: 66h with a 16-bit immediate (the predecoder stalls)
  bool NotLastDecoder = false; // before Skylake, one a jcc after it could fuse with (CMP, TEST, ...) avoids the last decoder
  bool FirstDecoder = false;   // taken by the first decoder alone, whatever its µops (complex_decoder)
  unsigned SyncUops = 0;       // stack-engine sync µops issued just before it
  bool Drain = false;          // issues once every older instruction has retired (serialising.h) ...
  unsigned DrainCycles = 0;    // ... and this many cycles more
  const llvm::mca::Instruction *Executed = nullptr;  // a move renamed away: the form it executes in
                                                     // when the cycle's renames are spent
};

struct FrontEndParams {
  unsigned PredecodeBytes, PredecodeWidth, Decoders, SimpleDecoderUops, QueueSize, IssueWidth, LcpPenalty;
  bool Modelled = true;  // false: only issue (the stack engine's sync µops), in the cycle an instruction is fetched
  unsigned RenamesPerCycle = 0;  // moves renamed away a cycle (move_elimination.h)
};

class MemoryUnit;

// The front end a table describes: its front_end parameters when the mechanism
// is on; otherwise one that only issues (stack sync µops included) at the
// dispatch width, holding at most a dispatch group.
FrontEndParams frontEndParams(const Globals &G, const llvm::MCSchedModel &SM);

// Per-instruction facts of B under the table whose instructions are `Lowered`.
// Fusion applies only when `Fusion` (the front-end mechanism) is on; the
// generation's complex_decoder opcodes need the first decoder when `FirstDecoder`
// (the complex_decoder mechanism) is.
std::vector<FrontEndInstr> frontEndFacts(const EngineImpl &E, const BlockImpl &B,
                                         const llvm::SmallVectorImpl<std::unique_ptr<llvm::mca::Instruction>> &Lowered,
                                         bool Fusion, bool FirstDecoder);

// What the front end reads of B whatever the table: each instruction's length,
// the µops micro-fusion saves it (of an instruction with enough µops), and
// whether it is a jcc macro-fused into the instruction before it.
struct StaticFrontEnd {
  int bytes = 0, micro_fused = 0;
  bool macro_fused = false;
};
std::vector<StaticFrontEnd> staticFrontEnd(const EngineImpl &E, const BlockImpl &B);

class FrontEndStage final : public llvm::mca::Stage {
  static constexpr unsigned kInstrQueue = 20;  // predecoded instructions awaiting decode (Haswell: 20)
  static constexpr unsigned kMsromUops = 4;    // more fused µops than this come from the microcode ROM

  llvm::mca::SourceMgr &SM;
  const std::vector<FrontEndInstr> Facts;
  const FrontEndParams P;
  std::vector<std::unique_ptr<llvm::mca::Instruction>> Owned;  // alive until retired, as in EntryStage
  unsigned FirstOwned = 0;  // source index of Owned[0]
  size_t NumRetired = 0;
  const MemoryUnit *LSU;    // may still read retired stores (null: none)
  std::deque<llvm::mca::InstRef> Predecoded, Queue;
  uint64_t Addr = 0;          // where the next instruction starts (the block starts aligned)
  uint64_t Block = 0;         // the aligned block the predecoder is in, numbered from Addr 0
  bool StraddlerMarked = false;  // the instruction that starts in Block and ends past it is marked in the next
  unsigned LcpStall = 0;     // cycles the predecoder still stalls on the next instruction's prefix
  bool LcpPaid = false;      // the next instruction's stall is over
  unsigned QueueUops = 0;    // fused µops in Queue
  unsigned DecodeBusy = 0;   // cycles the decoders still spend on a microcoded instruction
  unsigned IssuedThisCycle = 0;
  unsigned RenamedThisCycle = 0;
  unsigned DrainLeft = 0;    // cycles the instruction at the queue's head still waits after the drain
  bool DrainStarted = false, DrainOver = false;

  const FrontEndInstr &facts(const llvm::mca::InstRef &IR) const {
    return Facts[IR.getSourceIndex() % Facts.size()];
  }
  unsigned cost(const llvm::mca::InstRef &IR) const { return facts(IR).Fused + facts(IR).SyncUops; }
  void predecode();
  void decode();
  bool olderRetired(const llvm::mca::InstRef &IR) const;
  void drain();

 public:
  FrontEndStage(llvm::mca::SourceMgr &SM, std::vector<FrontEndInstr> Facts, FrontEndParams P,
                const MemoryUnit *LSU)
      : SM(SM), Facts(std::move(Facts)), P(P), LSU(LSU) {}
  bool hasWorkToComplete() const override;
  bool isAvailable(const llvm::mca::InstRef &IR) const override;
  llvm::Error execute(llvm::mca::InstRef &IR) override;
  llvm::Error cycleStart() override;
  llvm::Error cycleEnd() override;
};

}  // namespace dt

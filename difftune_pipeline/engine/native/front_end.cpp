#include "front_end.h"
#include "memory_unit.h"

#include <regex>

using namespace llvm;

namespace dt {
namespace {

// X86 condition codes as LLVM numbers them (X86::CondCode).
enum Cond { kO, kNO, kB, kAE, kE, kNE, kBE, kA, kS, kNS, kP, kNP, kL, kGE, kLE, kG };

// An immediate operand, not counting the memory operand's scale and displacement.
bool hasImmediate(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  for (unsigned I = 0; I < MI.getNumOperands(); ++I) {
    if (I < D.getNumOperands() && D.operands()[I].OperandType == MCOI::OPERAND_MEMORY) {
      I += 4;  // base, scale, index, displacement, segment
      continue;
    }
    if (MI.getOperand(I).isImm() || MI.getOperand(I).isExpr()) return true;
  }
  return false;
}

// The first half of a macro-fused pair, and the conditions it fuses with
// (Intel's optimization manual, "macro-fusion", Sandy Bridge onwards): TEST and
// AND with every jcc; CMP, ADD and SUB with all but O/NO/S/NS/P/NP; INC and DEC
// with E/NE/L/GE/LE/G. Never with both a memory operand and an immediate, a
// RIP-relative operand, or a memory destination (a read-modify-write).
// The kind (CMP, TEST, ...) of an instruction that may fuse with a jcc after it; "" if none may.
std::string fusibleKind(const EngineImpl &E, const MCInst &First) {
  static const std::regex Name("(CMP|TEST|ADD|SUB|AND|INC|DEC)(8|16|32|64)[A-Za-z0-9_]*");
  std::smatch Match;
  const std::string Op = E.MCII->getName(First.getOpcode()).str();
  if (!std::regex_match(Op, Match, Name)) return "";
  const MCInstrDesc &D = E.MCII->get(First.getOpcode());
  const MemOperand M = memOperand(E, First);
  if (D.mayStore() || M.RipRelative || (M.Present && hasImmediate(E, First))) return "";
  return Match[1];
}

bool fusesWith(const EngineImpl &E, const MCInst &First, const MCInst &Jcc) {
  const std::string Kind = fusibleKind(E, First);
  if (Kind.empty() || !StringRef(E.MCII->getName(Jcc.getOpcode())).starts_with("JCC_")) return false;
  const MCOperand &CondOp = Jcc.getOperand(Jcc.getNumOperands() - 1);
  if (!CondOp.isImm()) return false;
  const int C = (int)CondOp.getImm();
  if (Kind == "TEST" || Kind == "AND") return true;
  if (Kind == "CMP" || Kind == "ADD" || Kind == "SUB")
    return C != kO && C != kNO && C != kS && C != kNS && C != kP && C != kNP;
  return C == kE || C == kNE || C == kL || C == kGE || C == kLE || C == kG;  // INC, DEC
}

// Fused-domain µops of an instruction of `Uops` unfused µops: a load and the
// operation on it issue as one, as do a store's address and data (micro-fusion).
// Sandy/Ivy Bridge unlaminate every indexed memory operand (unlaminates_indexed); Haswell on keeps
// indexed ones fused only when the destination is also a source (two operands).
// Unlamination splits the µop after the decoders (Intel's optimization manual,
// "Micro-fusion"), which see it fused (`AtDecode`): BHive measures `cmpq
// 24(%rcx,%rax,8), %rdx` at 0.50 cycles an iteration on Haswell, where the first
// decoder alone would give 1.0.
unsigned fusedUops(const EngineImpl &E, const MCInst &MI, unsigned Uops, bool AtDecode) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  const MemOperand M = memOperand(E, MI);
  if (!M.Present || Uops < 2) return Uops;
  if (M.Indexed && !AtDecode) {
    const bool TwoOperand = D.getNumDefs() && D.getOperandConstraint(D.getNumDefs(), MCOI::TIED_TO) == 0;
    if (E.Gen.unlaminates_indexed || !TwoOperand) return Uops;
  }
  unsigned Fused = Uops;
  if (D.mayLoad() && Fused >= 2) --Fused;
  if (D.mayStore() && Fused >= 2) --Fused;
  return Fused;
}

// A length-changing prefix (Intel's optimization manual, "Length-Changing Prefixes
// (LCP)"): the operand-size prefix 66h on an instruction whose immediate it shrinks
// from 32 to 16 bits (cmp $1024, %si: 66 81 FE 00 04), so the predecoder must
// recompute the length. An 8-bit immediate (shifts, rotates, the *ri8 forms) keeps
// its length; in 64-bit mode the address-size prefix 67h changes no length.
bool lengthChanging(const EngineImpl &E, const MCInst &MI) {
  static const std::regex Name("(?!SH|SA|RO|RC)[A-Z]+16(ri|mi|rri|rmi|i16)(_alt|_REV)?");
  return std::regex_match(E.MCII->getName(MI.getOpcode()).str(), Name);
}

// Where an instruction's nominal opcode byte starts (XED's pos_nominal_opcode):
// after the legacy prefixes, REX, a VEX or EVEX prefix, or the 0F (0F 38, 0F 3A)
// escape. The predecoder reads it to decide whether an instruction that straddles
// two blocks belongs to the first.
unsigned opcodeOffset(const std::string &Hex) {
  const size_t N = Hex.size() / 2;
  auto Byte = [&](size_t I) { return I < N ? (unsigned)std::stoul(Hex.substr(2 * I, 2), nullptr, 16) : 0u; };
  auto Legacy = [](unsigned B) {
    return B == 0xF0 || B == 0xF2 || B == 0xF3 || B == 0x2E || B == 0x36 || B == 0x3E || B == 0x26 || B == 0x64 ||
           B == 0x65 || B == 0x66 || B == 0x67;
  };
  size_t I = 0;
  while (I < N && Legacy(Byte(I))) ++I;
  if (I < N && (Byte(I) & 0xF0) == 0x40) ++I;
  if (Byte(I) == 0xC5) I += 2;
  else if (Byte(I) == 0xC4) I += 3;
  else if (Byte(I) == 0x62) I += 4;
  else if (Byte(I) == 0x0F) I += (Byte(I + 1) == 0x38 || Byte(I + 1) == 0x3A) ? 2 : 1;
  return (unsigned)std::min(I, N ? N - 1 : 0);
}

}  // namespace

MemOperand memOperand(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  MemOperand M;
  for (unsigned I = 0; I + 2 < MI.getNumOperands() && I < D.getNumOperands(); ++I) {
    if (D.operands()[I].OperandType != MCOI::OPERAND_MEMORY) continue;
    M.Present = true;
    const MCOperand &Base = MI.getOperand(I), &Index = MI.getOperand(I + 2);
    M.Indexed = Index.isReg() && Index.getReg();
    M.RipRelative = Base.isReg() && Base.getReg() && StringRef(E.MRI->getName(Base.getReg())) == "RIP";
    if (Base.isReg()) M.Base = Base.getReg();
    if (I + 4 < MI.getNumOperands()) {
      const MCOperand &Disp = MI.getOperand(I + 3), &Segment = MI.getOperand(I + 4);
      M.ImmediateDisp = Disp.isImm();
      M.Disp = Disp.isImm() ? Disp.getImm() : 0;
      M.Segmented = Segment.isReg() && Segment.getReg();
    }
    break;
  }
  return M;
}

FrontEndParams frontEndParams(const Globals &G, const MCSchedModel &SM) {
  constexpr unsigned Unlimited = 1u << 20;
  if (!G.on("front_end")) return {Unlimited, Unlimited, Unlimited, Unlimited, SM.IssueWidth, SM.IssueWidth, 0, false};
  auto P = [&](const char *Name) { return (unsigned)G.param(Name); };
  return {P("predecode_bytes"), P("predecode_width"), P("decoders"),   P("simple_decoder_uops"),
          P("uop_queue_size"),  P("issue_width"),     P("lcp_penalty"), true};
}

// Whether MI is a register form of an opcode the generation's complex_decoder names.
static bool needsFirstDecoder(const EngineImpl &E, const MCInst &MI) {
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  if (D.mayLoad() || D.mayStore()) return false;
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  return llvm::any_of(E.Gen.complex_decoder, [&](const std::string &Opcode) { return Name.starts_with(Opcode); });
}

std::vector<FrontEndInstr> frontEndFacts(const EngineImpl &E, const BlockImpl &B,
                                         const SmallVectorImpl<std::unique_ptr<mca::Instruction>> &Lowered,
                                         bool Fusion, bool FirstDecoder) {
  std::vector<FrontEndInstr> Out(B.Insts.size());
  for (size_t I = 0; I < Out.size(); ++I) {
    Out[I].Bytes = std::max<size_t>(1, B.Encoding[I].size() / 2);
    Out[I].OpcodeAt = opcodeOffset(B.Encoding[I]);
    const unsigned Uops = Lowered[I]->getNumMicroOps();
    Out[I].Fused = Fusion ? fusedUops(E, B.Insts[I], Uops, false) : Uops;
    Out[I].Decoded = Fusion ? fusedUops(E, B.Insts[I], Uops, true) : Uops;
    Out[I].LengthChanging = Fusion && lengthChanging(E, B.Insts[I]);
    Out[I].NotLastDecoder = Fusion && !E.Gen.fusible_on_last_decoder && !fusibleKind(E, B.Insts[I]).empty();
    Out[I].FirstDecoder = Fusion && FirstDecoder && needsFirstDecoder(E, B.Insts[I]);
  }
  if (Fusion)
    for (size_t I = 0; I + 1 < Out.size(); ++I)
      if (!Out[I].FusesWithNext && Out[I].Fused && fusesWith(E, B.Insts[I], B.Insts[I + 1])) {
        Out[I].FusesWithNext = true;
        Out[I + 1].Fused = Out[I + 1].Decoded = 0;
        ++I;  // a jcc fuses with one instruction
      }
  return Out;
}

std::vector<StaticFrontEnd> staticFrontEnd(const EngineImpl &E, const BlockImpl &B) {
  std::vector<StaticFrontEnd> Out(B.Insts.size());
  for (size_t I = 0; I < Out.size(); ++I) {
    Out[I].bytes = (int)std::max<size_t>(1, B.Encoding[I].size() / 2);
    Out[I].micro_fused = 4 - (int)fusedUops(E, B.Insts[I], 4, false);
  }
  for (size_t I = 0; I + 1 < Out.size(); ++I)
    if (fusesWith(E, B.Insts[I], B.Insts[I + 1])) Out[++I].macro_fused = true;
  return Out;
}

// The predecoder works through the code in aligned blocks of PredecodeBytes
// (the unrolled block starts at an aligned address), one block per cycle or more:
// a cycle marks at most PredecodeWidth instructions, those that end in the block.
// One that starts in it and ends in the next is marked in the next block's first
// cycle, where it takes a slot; when this block's last cycle used every slot and
// the instruction's nominal opcode is still in this block, it costs a cycle of its
// own first (Intel's optimization manual, "legacy decode pipeline"; the rule as
// Abel and Reineke's uiCA measured it on Sandy Bridge to Skylake: BHive measures
// the 3-byte `cmpl $31, %eax` at 0.37 cycles an iteration on Haswell, and 3-byte
// register moves with a REX prefix, whose opcode is their second byte, at 0.30
// on Haswell and Ivy Bridge). It runs only while the queue of
// kInstrQueue instructions has room for a cycle's worth (of at most half the
// queue, so that a wide predecoder never waits for an empty one). An instruction
// with a length-changing prefix first stalls it LcpPenalty cycles.
void FrontEndStage::predecode() {
  if (LcpStall) {
    --LcpStall;
    return;
  }
  if (!P.Modelled) {  // instructions arrive as issue takes them
    for (; SM.hasNext() && Predecoded.size() < kInstrQueue; SM.updateNext()) {
      Owned.push_back(std::make_unique<mca::Instruction>(SM.peekNext().second));
      Predecoded.emplace_back(SM.peekNext().first, Owned.back().get());
    }
    return;
  }
  if (!SM.hasNext() || Predecoded.size() + std::min(P.PredecodeWidth, kInstrQueue / 2) > kInstrQueue) return;
  const auto ends = [&] { return Addr + Facts[SM.peekNext().first % Facts.size()].Bytes; };
  const auto blockEnd = [&] { return (Block + 1) * P.PredecodeBytes; };
  // A block with nothing left to mark costs no cycle.
  while (ends() > blockEnd() && (Addr >= blockEnd() || StraddlerMarked)) {
    ++Block;
    StraddlerMarked = false;
  }
  for (unsigned Slot = 0; SM.hasNext() && Predecoded.size() < kInstrQueue; ++Slot) {
    if (ends() > blockEnd()) {  // the next block, next cycle; a straddler first marked as this block's
      const uint64_t Opcode = Addr + Facts[SM.peekNext().first % Facts.size()].OpcodeAt;
      if (Addr < blockEnd() && (Slot < P.PredecodeWidth || Opcode >= blockEnd())) StraddlerMarked = true;
      return;
    }
    if (Slot == P.PredecodeWidth) return;
    mca::SourceRef SR = SM.peekNext();
    if (Facts[SR.first % Facts.size()].LengthChanging && !LcpPaid && P.LcpPenalty) {
      LcpPaid = true;
      LcpStall = P.LcpPenalty - 1;  // this cycle is the first
      return;
    }
    Addr = ends();
    LcpPaid = false;
    Owned.push_back(std::make_unique<mca::Instruction>(SR.second));
    Predecoded.emplace_back(SR.first, Owned.back().get());
    SM.updateNext();
  }
}

// Up to Decoders instructions (a fused pair counts once); one that issues as
// more than SimpleDecoderUops fused µops, or that the generation lists
// (complex_decoder), needs the first decoder; one that could
// fuse with a jcc after it cannot take the last decoder before Skylake (uiCA's
// measurements); a microcoded one holds the decoders for a cycle per kMsromUops µops.
void FrontEndStage::decode() {
  if (DecodeBusy) {
    --DecodeBusy;
    return;
  }
  for (unsigned Slot = 0; Slot < P.Decoders && !Predecoded.empty(); ++Slot) {
    const mca::InstRef First = Predecoded.front();
    const bool Pair = facts(First).FusesWithNext;
    if (Pair && Predecoded.size() < 2) return;  // its second half is not predecoded yet
    const unsigned Uops = facts(First).Decoded;
    if ((Uops > P.SimpleDecoderUops || facts(First).FirstDecoder) && Slot > 0) return;
    if (facts(First).NotLastDecoder && Slot + 1 == P.Decoders && Slot > 0) return;
    const unsigned Cost = cost(First) + (Pair ? cost(Predecoded[1]) : 0);
    if (!Queue.empty() && QueueUops + Cost > P.QueueSize) return;
    for (int I = 0; I < (Pair ? 2 : 1); ++I) {
      Queue.push_back(Predecoded.front());
      Predecoded.pop_front();
    }
    QueueUops += Cost;
    if (Uops > kMsromUops) {
      DecodeBusy = (Uops + kMsromUops - 1) / kMsromUops - 1;
      return;
    }
  }
}

bool FrontEndStage::hasWorkToComplete() const {
  return !Predecoded.empty() || !Queue.empty() || !SM.isEnd();
}

// Decoding takes what was predecoded in earlier cycles (a cycle of front-end
// latency); without the front-end mechanism an instruction issues when fetched.
Error FrontEndStage::cycleStart() {
  IssuedThisCycle = RenamedThisCycle = 0;
  if (P.Modelled) {
    decode();
    predecode();
  } else {
    predecode();
    decode();
  }
  drain();
  return ErrorSuccess();
}

bool FrontEndStage::olderRetired(const mca::InstRef &IR) const {
  for (size_t K = NumRetired; FirstOwned + K < IR.getSourceIndex(); ++K)
    if (!Owned[K]->isRetired()) return false;
  return true;
}

// An instruction that drains the pipeline issues only once every older
// instruction has retired and its DrainCycles more have passed.
void FrontEndStage::drain() {
  if (Queue.empty() || !facts(Queue.front()).Drain || DrainOver) return;
  if (!DrainStarted) {
    if (!olderRetired(Queue.front())) return;
    DrainStarted = true;
    DrainLeft = facts(Queue.front()).DrainCycles;
  }
  if (DrainLeft)
    --DrainLeft;
  else
    DrainOver = true;
}

// Fused µops leave the queue in order, IssueWidth per cycle (one wider than that
// goes alone), as far as dispatch accepts them. A move renamed away past the
// cycle's renames issues in the form that executes.
bool FrontEndStage::isAvailable(const mca::InstRef &) const {
  if (Queue.empty()) return false;
  const mca::InstRef &IR = Queue.front();
  if (facts(IR).Drain && !DrainOver) return false;
  if (IssuedThisCycle && IssuedThisCycle + cost(IR) > P.IssueWidth) return false;
  return checkNextStage(IR);
}

Error FrontEndStage::execute(mca::InstRef &) {
  mca::InstRef IR = Queue.front();
  Queue.pop_front();
  if (facts(IR).Drain) DrainStarted = DrainOver = false;
  if (const mca::Instruction *Executed = facts(IR).Executed) {
    if (RenamedThisCycle < P.RenamesPerCycle) {
      ++RenamedThisCycle;
    } else {
      std::unique_ptr<mca::Instruction> &Slot = Owned[IR.getSourceIndex() - FirstOwned];
      Slot = std::make_unique<mca::Instruction>(*Executed);
      IR = mca::InstRef(IR.getSourceIndex(), Slot.get());
    }
  }
  QueueUops -= cost(IR);
  IssuedThisCycle += cost(IR);
  return moveToTheNextStage(IR);
}

// Frees the instructions that have retired, oldest first, as EntryStage does,
// but none the load/store unit may still read.
Error FrontEndStage::cycleEnd() {
  const unsigned Keep = LSU ? LSU->oldestReferenced() : ~0u;
  while (NumRetired < Owned.size() && Owned[NumRetired]->isRetired() && FirstOwned + NumRetired < Keep)
    ++NumRetired;
  if (NumRetired * 2 >= Owned.size() && NumRetired) {
    Owned.erase(Owned.begin(), Owned.begin() + NumRetired);
    FirstOwned += NumRetired;
    NumRetired = 0;
  }
  return ErrorSuccess();
}

}  // namespace dt

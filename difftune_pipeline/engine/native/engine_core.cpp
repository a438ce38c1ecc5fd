// LLVM-facing half of the engine (built without RTTI, like LLVM).
//
// Overrides work without modifying LLVM: a compiled table is an MCSubtargetInfo
// built through its public constructor over owned copies of the CPU's
// WriteProcRes / WriteLatency / ReadAdvance / SchedClass tables. An overridden
// opcode's static class is marked variant in the copy, so InstrBuilder asks
// resolveVariantSchedClass, which resolves through the original X86 subtarget
// (its generated predicates) and then hands out the opcode's private class.
// Every other opcode resolves to an untouched clone of its class, so an edit
// never leaks to opcodes that share a scheduling class.
#include "engine_core.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCDisassembler/MCDisassembler.h"
#include "llvm/MC/MCInst.h"
#include "llvm/MC/MCInstPrinter.h"
#include "llvm/MC/MCInstrAnalysis.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCObjectFileInfo.h"
#include "llvm/MC/MCParser/MCAsmParser.h"
#include "llvm/MC/MCParser/MCTargetAsmParser.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCStreamer.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCTargetOptions.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/MCA/Context.h"
#include "llvm/MCA/CustomBehaviour.h"
#include "llvm/MCA/InstrBuilder.h"
#include "llvm/MCA/Pipeline.h"
#include "llvm/MCA/SourceMgr.h"
#include "llvm/MCA/Stages/Stage.h"
#include "llvm/MCA/Support.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#if LLVM_VERSION_MAJOR >= 16
#include "llvm/TargetParser/Triple.h"
#else
#include "llvm/ADT/Triple.h"
#endif

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

extern "C" {
void LLVMInitializeX86TargetInfo();
void LLVMInitializeX86TargetMC();
void LLVMInitializeX86AsmParser();
void LLVMInitializeX86Disassembler();
void LLVMInitializeX86TargetMCA();
}

using namespace llvm;

namespace dt {
namespace {

constexpr const char *kTriple = "x86_64-unknown-linux-gnu";
constexpr unsigned kCallLatency = 100;  // llvm-mca's -call-latency default

#if LLVM_VERSION_MAJOR >= 18
inline unsigned wprCycles(const MCWriteProcResEntry &E) { return E.ReleaseAtCycle; }
inline void setWprCycles(MCWriteProcResEntry &E, unsigned C) { E.ReleaseAtCycle = C; }
#else
inline unsigned wprCycles(const MCWriteProcResEntry &E) { return E.Cycles; }
inline void setWprCycles(MCWriteProcResEntry &E, unsigned C) { E.Cycles = C; }
#endif

std::string errorText(Error E) {
  std::string S;
  handleAllErrors(std::move(E), [&](const ErrorInfoBase &EI) { S = EI.message(); });
  return S;
}

// Collects the instructions of parsed assembly text; everything else is ignored.
class CollectingStreamer final : public MCStreamer {
 public:
  explicit CollectingStreamer(MCContext &Ctx) : MCStreamer(Ctx) {}
  std::vector<MCInst> Insts;
  void emitInstruction(const MCInst &Inst, const MCSubtargetInfo &) override {
    Insts.push_back(Inst);
  }
  bool emitSymbolAttribute(MCSymbol *, MCSymbolAttr) override { return true; }
#if LLVM_VERSION_MAJOR >= 16
  void emitCommonSymbol(MCSymbol *, uint64_t, Align) override {}
  void emitZerofill(MCSection *, MCSymbol *, uint64_t, Align, SMLoc) override {}
#else
  void emitCommonSymbol(MCSymbol *, uint64_t, unsigned) override {}
  void emitZerofill(MCSection *, MCSymbol *, uint64_t, unsigned, SMLoc) override {}
#endif
};

// Watches a simulation: ends it past its cycle budget, and (opt-in) fast-forwards
// it once the cycles between iterations repeat. It fails in cycleEnd: LLVM 14's
// Pipeline overwrites errors returned from cycleStart.
class MonitorStage final : public mca::Stage, public mca::HWEventListener {
  static constexpr size_t kWindow = 32, kMaxPeriod = 16;
  const uint64_t Cap;
  const unsigned BlockSize, Iterations;
  const bool FastForward;
  uint64_t Cycles = 0;
  std::vector<uint64_t> Retired;  // cycle in which each iteration's last instruction retired

  uint64_t delta(size_t I) const { return Retired[I] - Retired[I - 1]; }

  // Once the last kWindow per-iteration increments are periodic with some
  // period P, the remaining iterations are taken to follow the same pattern.
  void detect() {
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

 public:
  int64_t Extrapolated = -1;  // total cycles predicted by fast-forward
  MonitorStage(uint64_t Cap, unsigned BlockSize, unsigned Iterations, bool FastForward)
      : Cap(Cap), BlockSize(BlockSize), Iterations(Iterations), FastForward(FastForward) {}
  bool hasWorkToComplete() const override { return false; }
  bool isAvailable(const mca::InstRef &) const override { return true; }
  Error execute(mca::InstRef &) override { return ErrorSuccess(); }
  void onEvent(const mca::HWInstructionEvent &E) override {
    if (E.Type != mca::HWInstructionEvent::Retired ||
        E.IR.getSourceIndex() % BlockSize != BlockSize - 1)
      return;
    Retired.push_back(Cycles);
    if (FastForward && Extrapolated < 0) detect();
  }
  Error cycleEnd() override {
    ++Cycles;
    if (Extrapolated >= 0)
      return createStringError(inconvertibleErrorCode(), "fast-forwarded");
    if (Cycles > Cap)
      return createStringError(inconvertibleErrorCode(), "cycle cap of %llu cycles exceeded",
                               (unsigned long long)Cap);
    return ErrorSuccess();
  }
};

}  // namespace

struct EngineImpl {
  std::string Mcpu;
  Triple TT{kTriple};
  const Target *TheTarget = nullptr;
  std::unique_ptr<MCRegisterInfo> MRI;
  std::unique_ptr<MCAsmInfo> MAI;
  std::unique_ptr<MCInstrInfo> MCII;
  std::unique_ptr<MCSubtargetInfo> STI;
  std::unique_ptr<MCInstrAnalysis> MCIA;
  MCTargetOptions MCOptions;
  std::unique_ptr<MCContext> DisCtx;
  std::unique_ptr<MCDisassembler> Dis;
  std::unique_ptr<MCInstPrinter> IP;
  std::mutex Mu;  // serialises disassembly, parsing and printing

  const MCSchedModel *SM = nullptr;
  unsigned NumClasses = 0;
  const MCWriteProcResEntry *WPR = nullptr;
  const MCWriteLatencyEntry *WL = nullptr;
  const MCReadAdvanceEntry *RA = nullptr;
  size_t NumWPR = 0, NumWL = 0, NumRA = 0;
  std::vector<uint64_t> ResMask;  // mca's resource masks
  StringMap<unsigned> OpcodeByName, ResourceByName;

  unsigned staticClass(unsigned Opcode) const { return MCII->get(Opcode).getSchedClass(); }
  bool isValidClass(unsigned C) const { return C && SM->getSchedClassDesc(C)->isValid(); }
  // The concrete class LLVM's own model resolves an instruction to (0: none).
  unsigned resolve(const MCInst &MI) const {
    unsigned C = staticClass(MI.getOpcode());
    while (C && SM->getSchedClassDesc(C)->isVariant())
      C = STI->resolveVariantSchedClass(C, &MI, MCII.get(), SM->getProcessorID());
    return C;
  }
  std::string rowKey(unsigned Opcode, unsigned Resolved) const {
    std::string K = MCII->getName(Opcode).str();
    if (Resolved != staticClass(Opcode)) K += "#" + std::to_string(Resolved);
    return K;
  }
  std::string printInst(const MCInst &MI) {
    std::string S;
    raw_string_ostream OS(S);
    IP->printInst(&MI, 0, "", *STI, OS);
    OS.flush();
    size_t B = S.find_first_not_of(" \t");
    S = B == std::string::npos ? "" : S.substr(B);
    std::replace(S.begin(), S.end(), '\t', ' ');
    return S;
  }
  // Sorted the way InstrBuilder sorts resource uses: units first, small groups first.
  void sortByMask(std::vector<std::pair<unsigned, int>> &V) const {
    std::sort(V.begin(), V.end(), [&](const auto &A, const auto &B) {
      uint64_t MA = ResMask[A.first], MB = ResMask[B.first];
      int PA = __builtin_popcountll(MA), PB = __builtin_popcountll(MB);
      return PA != PB ? PA < PB : MA < MB;
    });
  }
  uint64_t normalized(unsigned Res) const {
    uint64_t M = ResMask[Res];
    if (__builtin_popcountll(M) > 1) M ^= (uint64_t(1) << (63 - __builtin_clzll(M)));
    return M;
  }
  // Does a use of A count towards B (A's units all inside group B)?
  bool containedIn(unsigned A, unsigned B) const {
    uint64_t N = normalized(A);
    return A != B && (N & ResMask[B]) == N;
  }
};

struct BlockImpl {
  std::shared_ptr<const EngineImpl> Engine;
  std::shared_ptr<SourceMgr> Src;  // parsed text only: owns the buffer
  std::shared_ptr<MCContext> Ctx;  // parsed text only: owns operand expressions
  std::string Error;
  std::vector<MCInst> Insts;
  std::vector<std::string> Text, Keys;
};

namespace {

class OverrideSubtargetInfo final : public MCSubtargetInfo {
  const EngineImpl &E;
  const std::unordered_map<uint64_t, unsigned> &Private;

 public:
  OverrideSubtargetInfo(const EngineImpl &Eng, ArrayRef<SubtargetSubTypeKV> PD,
                        const MCWriteProcResEntry *WPR, const MCWriteLatencyEntry *WL,
                        const MCReadAdvanceEntry *RA,
                        const std::unordered_map<uint64_t, unsigned> &Priv)
      // No feature table: the features are copied from the original subtarget
      // (LLVM 14 does not expose its feature and processor tables).
      : MCSubtargetInfo(Eng.TT, Eng.STI->getCPU(), Eng.STI->getCPU(), "", {}, PD, WPR, WL, RA,
                        nullptr, nullptr, nullptr),
        E(Eng), Private(Priv) {
    setFeatureBits(Eng.STI->getFeatureBits());
  }

  unsigned resolveVariantSchedClass(unsigned SchedClass, const MCInst *MI,
                                    const MCInstrInfo *MCII, unsigned CPUID) const override {
    unsigned C = SchedClass;
    while (C && C < E.NumClasses && E.SM->getSchedClassDesc(C)->isVariant())
      C = E.STI->resolveVariantSchedClass(C, MI, MCII, CPUID);
    if (!C) return 0;
    auto It = Private.find((uint64_t(MI->getOpcode()) << 32) | C);
    return It != Private.end() ? It->second : C + E.NumClasses;
  }
};

}  // namespace

struct TableImpl {
  std::shared_ptr<const EngineImpl> Engine;
  MCSchedModel SM;
  MCExtraProcessorInfo EPI;
  std::vector<MCSchedClassDesc> Classes;  // originals, untouched clones, private classes
  std::vector<MCWriteProcResEntry> WPR;
  std::vector<MCWriteLatencyEntry> WL;
  std::vector<MCReadAdvanceEntry> RA;
  std::unordered_map<uint64_t, unsigned> Private;  // (opcode << 32 | class) -> private class
  std::vector<SubtargetSubTypeKV> ProcDesc;        // one entry: the CPU, over SM
  std::unique_ptr<OverrideSubtargetInfo> STI;
};

// ---------------------------------------------------------------- Block

bool Block::ok() const { return impl && impl->Error.empty(); }
const std::string &Block::error() const { return impl->Error; }
size_t Block::size() const { return impl->Insts.size(); }
std::vector<std::string> Block::asm_lines() const { return impl->Text; }
std::vector<std::string> Block::row_keys() const { return impl->Keys; }
std::vector<std::string> Block::opcodes() const {
  std::vector<std::string> R;
  for (const MCInst &MI : impl->Insts) R.push_back(impl->Engine->MCII->getName(MI.getOpcode()).str());
  return R;
}

static std::string widest(const MCRegisterInfo &MRI, MCRegister R) {
  MCRegister Top = R;
  for (MCSuperRegIterator S(R, &MRI); S.isValid(); ++S)
    if (!MCSuperRegIterator(*S, &MRI).isValid()) Top = *S;
  return MRI.getName(Top);
}

std::vector<InstrOperands> Block::operands() const {
  const EngineImpl &E = *impl->Engine;
  std::vector<InstrOperands> Out;
  for (const MCInst &MI : impl->Insts) {
    InstrOperands O;
    const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
    O.may_load = D.mayLoad();
    O.may_store = D.mayStore();
    APInt Mask;
    O.dependency_breaking = E.MCIA->isZeroIdiom(MI, Mask, E.SM->getProcessorID()) ||
                            E.MCIA->isDependencyBreaking(MI, Mask, E.SM->getProcessorID());
    for (unsigned I = 0; I < MI.getNumOperands(); ++I) {
      const MCOperand &Op = MI.getOperand(I);
#if LLVM_VERSION_MAJOR >= 16
      bool Memory = I < D.getNumOperands() && D.operands()[I].OperandType == MCOI::OPERAND_MEMORY;
#else
      bool Memory = I < D.getNumOperands() && D.OpInfo[I].OperandType == MCOI::OPERAND_MEMORY;
#endif
      if (Memory) {
        if (!O.address.empty()) O.address += ",";
        O.address += Op.isReg() ? (Op.getReg() ? std::string(E.MRI->getName(Op.getReg())) : "")
                     : Op.isImm() ? std::to_string(Op.getImm()) : "sym";
      }
      if (!Op.isReg() || !Op.getReg()) continue;
      if (I < D.getNumDefs())
        O.writes.push_back(widest(*E.MRI, Op.getReg()));
      else if (Memory || !O.dependency_breaking)
        O.reads.push_back(widest(*E.MRI, Op.getReg()));
    }
#if LLVM_VERSION_MAJOR >= 16
    for (MCPhysReg R : D.implicit_uses()) O.reads.push_back(widest(*E.MRI, R));
    for (MCPhysReg R : D.implicit_defs()) O.writes.push_back(widest(*E.MRI, R));
#else
    for (const MCPhysReg *R = D.getImplicitUses(); R && *R; ++R) O.reads.push_back(widest(*E.MRI, *R));
    for (const MCPhysReg *R = D.getImplicitDefs(); R && *R; ++R) O.writes.push_back(widest(*E.MRI, *R));
#endif
    for (auto *V : {&O.reads, &O.writes}) {
      std::sort(V->begin(), V->end());
      V->erase(std::unique(V->begin(), V->end()), V->end());
    }
    Out.push_back(std::move(O));
  }
  return Out;
}

// ---------------------------------------------------------------- Engine

Engine::Engine(const std::string &mcpu) : impl_(std::make_shared<EngineImpl>()) {
  static std::once_flag Once;
  std::call_once(Once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmParser();
    LLVMInitializeX86Disassembler();
    LLVMInitializeX86TargetMCA();
  });
  EngineImpl &E = *impl_;
  E.Mcpu = mcpu;
  std::string Err;
  E.TheTarget = TargetRegistry::lookupTarget(kTriple, Err);
  if (!E.TheTarget) throw std::runtime_error("LLVM has no x86 target: " + Err);
  E.MRI.reset(E.TheTarget->createMCRegInfo(kTriple));
  E.MAI.reset(E.TheTarget->createMCAsmInfo(*E.MRI, kTriple, E.MCOptions));
  E.MCII.reset(E.TheTarget->createMCInstrInfo());
  E.STI.reset(E.TheTarget->createMCSubtargetInfo(kTriple, mcpu, ""));
  if (!E.STI || !E.STI->isCPUStringValid(mcpu))
    throw std::invalid_argument("unknown x86 CPU '" + mcpu + "'");
  if (!E.STI->getSchedModel().hasInstrSchedModel())
    throw std::invalid_argument("CPU '" + mcpu + "' has no instruction scheduling model");
  E.MCIA.reset(E.TheTarget->createMCInstrAnalysis(E.MCII.get()));
  E.DisCtx = std::make_unique<MCContext>(E.TT, E.MAI.get(), E.MRI.get(), E.STI.get());
  E.Dis.reset(E.TheTarget->createMCDisassembler(*E.STI, *E.DisCtx));
  E.IP.reset(E.TheTarget->createMCInstPrinter(E.TT, 0, *E.MAI, *E.MCII, *E.MRI));
  if (!E.Dis || !E.IP) throw std::runtime_error("LLVM x86 disassembler or printer missing");

  E.SM = &E.STI->getSchedModel();
  E.NumClasses = E.SM->NumSchedClasses;

  // Locate the CPU's tables and their extents through the classes that index them.
  for (unsigned C = 0; C < E.NumClasses; ++C) {
    const MCSchedClassDesc *D = E.SM->getSchedClassDesc(C);
    if (!D->isValid() || D->isVariant()) continue;
    if (D->NumWriteProcResEntries) {
      E.WPR = E.STI->getWriteProcResBegin(D) - D->WriteProcResIdx;
      E.NumWPR = std::max<size_t>(E.NumWPR, D->WriteProcResIdx + D->NumWriteProcResEntries);
    }
    if (D->NumWriteLatencyEntries) {
      E.WL = E.STI->getWriteLatencyEntry(D, 0) - D->WriteLatencyIdx;
      E.NumWL = std::max<size_t>(E.NumWL, D->WriteLatencyIdx + D->NumWriteLatencyEntries);
    }
    if (D->NumReadAdvanceEntries) {
      E.RA = E.STI->getReadAdvanceEntries(*D).data() - D->ReadAdvanceIdx;
      E.NumRA = std::max<size_t>(E.NumRA, D->ReadAdvanceIdx + D->NumReadAdvanceEntries);
    }
  }
  E.ResMask.assign(E.SM->getNumProcResourceKinds(), 0);
  mca::computeProcResourceMasks(*E.SM, E.ResMask);
  for (unsigned R = 1; R < E.SM->getNumProcResourceKinds(); ++R)
    E.ResourceByName[E.SM->getProcResource(R)->Name] = R;
  for (unsigned O = 0; O < E.MCII->getNumOpcodes(); ++O) E.OpcodeByName[E.MCII->getName(O)] = O;
}

Engine::~Engine() = default;
const std::string &Engine::mcpu() const { return impl_->Mcpu; }

static void finishBlock(const EngineImpl &E, BlockImpl &B) {
  for (const MCInst &MI : B.Insts) {
    unsigned R = E.resolve(MI);
    B.Keys.push_back(E.rowKey(MI.getOpcode(), R ? R : E.staticClass(MI.getOpcode())));
  }
}

Block Engine::disassemble(const std::string &hex) const {
  EngineImpl &E = *impl_;
  auto B = std::make_shared<BlockImpl>();
  B->Engine = impl_;
  auto fail = [&](std::string Msg) {
    B->Error = std::move(Msg);
    B->Insts.clear();
    B->Text.clear();
    return Block{B};
  };
  if (hex.empty()) return fail("empty block");
  if (hex.size() % 2) return fail("odd number of hex digits (" + std::to_string(hex.size()) + ")");
  std::vector<uint8_t> Bytes;
  for (size_t I = 0; I < hex.size(); I += 2) {
    for (size_t J = I; J < I + 2; ++J)
      if (!isxdigit((unsigned char)hex[J]))
        return fail("non-hex character at position " + std::to_string(J));
    Bytes.push_back((uint8_t)std::stoi(hex.substr(I, 2), nullptr, 16));
  }
  std::lock_guard<std::mutex> L(E.Mu);
  for (uint64_t Off = 0; Off < Bytes.size();) {
    MCInst MI;
    uint64_t Size = 0;
    auto S = E.Dis->getInstruction(MI, Size, ArrayRef<uint8_t>(Bytes).slice(Off), Off, nulls());
    if (S == MCDisassembler::Fail || Size == 0)
      return fail("undecodable bytes at offset " + std::to_string(Off) + ": " +
                  hex.substr(2 * Off, std::min<size_t>(16, hex.size() - 2 * Off)));
    B->Insts.push_back(MI);
    B->Text.push_back(E.printInst(MI));
    Off += Size;
  }
  finishBlock(E, *B);
  return Block{B};
}

Block Engine::parse_asm(const std::string &text) const {
  EngineImpl &E = *impl_;
  auto B = std::make_shared<BlockImpl>();
  B->Engine = impl_;
  B->Src = std::make_shared<SourceMgr>();
  std::string Diag;
  B->Src->setDiagHandler(
      [](const SMDiagnostic &D, void *Ctx) {
        auto &Out = *static_cast<std::string *>(Ctx);
        if (D.getKind() != SourceMgr::DK_Error) return;
        if (!Out.empty()) Out += "; ";
        Out += "line " + std::to_string(D.getLineNo()) + ": " + D.getMessage().str();
      },
      &Diag);
  B->Src->AddNewSourceBuffer(MemoryBuffer::getMemBufferCopy(text, "<asm>"), SMLoc());
  std::lock_guard<std::mutex> L(E.Mu);
  B->Ctx = std::make_shared<MCContext>(E.TT, E.MAI.get(), E.MRI.get(), E.STI.get(), B->Src.get());
  std::unique_ptr<MCObjectFileInfo> MOFI(E.TheTarget->createMCObjectFileInfo(*B->Ctx, false));
  B->Ctx->setObjectFileInfo(MOFI.get());
  CollectingStreamer Str(*B->Ctx);
  std::unique_ptr<MCAsmParser> P(createMCAsmParser(*B->Src, *B->Ctx, Str, *E.MAI));
  std::unique_ptr<MCTargetAsmParser> TAP(
      E.TheTarget->createMCAsmParser(*E.STI, *P, *E.MCII, E.MCOptions));
  P->setTargetParser(*TAP);
  bool Failed = P->Run(false);
  B->Ctx->setObjectFileInfo(nullptr);
  if (Failed || !Diag.empty()) {
    B->Error = Diag.empty() ? "assembly could not be parsed" : Diag;
    return Block{B};
  }
  if (Str.Insts.empty()) {
    B->Error = "empty block";
    return Block{B};
  }
  B->Insts = std::move(Str.Insts);
  for (const MCInst &MI : B->Insts) B->Text.push_back(E.printInst(MI));
  finishBlock(E, *B);
  return Block{B};
}

Globals Engine::default_globals() const {
  return Globals{(int)impl_->SM->IssueWidth, (int)impl_->SM->MicroOpBufferSize};
}

std::vector<Resource> Engine::resources() const {
  const MCSchedModel &SM = *impl_->SM;
  std::vector<Resource> Out;
  for (unsigned R = 1; R < SM.getNumProcResourceKinds(); ++R) {
    const MCProcResourceDesc &D = *SM.getProcResource(R);
    Resource X{D.Name, (int)D.NumUnits, D.SubUnitsIdxBegin != nullptr, {}};
    if (X.is_group)
      for (unsigned U = 0; U < D.NumUnits; ++U)
        X.members.push_back(SM.getProcResource(D.SubUnitsIdxBegin[U])->Name);
    Out.push_back(std::move(X));
  }
  return Out;
}

static Row rowFromClass(const EngineImpl &E, std::string Key, unsigned C) {
  const MCSchedClassDesc &D = *E.SM->getSchedClassDesc(C);
  Row R;
  R.key = std::move(Key);
  R.uops = D.NumMicroOps;
  for (unsigned I = 0; I < D.NumWriteLatencyEntries; ++I)
    R.latency.push_back(E.WL[D.WriteLatencyIdx + I].Cycles);
  for (unsigned I = 0; I < D.NumReadAdvanceEntries; ++I) {
    const MCReadAdvanceEntry &A = E.RA[D.ReadAdvanceIdx + I];
    R.read_advance.push_back({(int)A.UseIdx, (int)A.WriteResourceID, A.Cycles});
  }
  // Undo the expansion exactly as InstrBuilder does: subtract from each group
  // the explicit cycles of the smaller resources it contains.
  std::vector<std::pair<unsigned, int>> Uses;
  for (unsigned I = 0; I < D.NumWriteProcResEntries; ++I) {
    const MCWriteProcResEntry &W = E.WPR[D.WriteProcResIdx + I];
    if (wprCycles(W)) Uses.push_back({W.ProcResourceIdx, (int)wprCycles(W)});
  }
  E.sortByMask(Uses);
  for (size_t I = 0; I < Uses.size(); ++I)
    for (size_t J = I + 1; J < Uses.size(); ++J)
      if (E.containedIn(Uses[I].first, Uses[J].first)) Uses[J].second -= Uses[I].second;
  for (auto &[Res, Cy] : Uses) R.ports.push_back({E.SM->getProcResource(Res)->Name, Cy});
  return R;
}

std::vector<Row> Engine::default_rows(const std::vector<Block> &blocks) const {
  const EngineImpl &E = *impl_;
  std::vector<Row> Rows;
  for (unsigned O = 0; O < E.MCII->getNumOpcodes(); ++O) {
    unsigned C = E.staticClass(O);
    if (E.isValidClass(C) && !E.SM->getSchedClassDesc(C)->isVariant())
      Rows.push_back(rowFromClass(E, E.MCII->getName(O).str(), C));
  }
  std::set<std::string> Seen;
  for (const Block &B : blocks) {
    if (!B.impl || B.impl->Engine.get() != &E) continue;
    for (const MCInst &MI : B.impl->Insts) {
      unsigned C = E.resolve(MI);
      if (!E.isValidClass(C) || C == E.staticClass(MI.getOpcode())) continue;
      std::string K = E.rowKey(MI.getOpcode(), C);
      if (Seen.insert(K).second) Rows.push_back(rowFromClass(E, K, C));
    }
  }
  std::sort(Rows.begin(), Rows.end(), [](const Row &A, const Row &B) { return A.key < B.key; });
  return Rows;
}

// ---------------------------------------------------------------- compile

namespace {
[[noreturn]] void invalid(const std::string &Where, const std::string &What) {
  throw InvalidTable(Where + ": " + What);
}
void checkRange(const std::string &Where, const std::string &Param, long V, long Lo, long Hi) {
  if (V < Lo || V > Hi)
    invalid(Where, Param + " = " + std::to_string(V) + " is outside the valid range " +
                       std::to_string(Lo) + ".." + std::to_string(Hi));
}
}  // namespace

Table Engine::compile(const Globals &G, const std::vector<Row> &rows) const {
  const EngineImpl &E = *impl_;
  auto T = std::make_shared<TableImpl>();
  T->Engine = impl_;
  T->SM = *E.SM;
  const Globals D = default_globals();
  checkRange("globals", "dispatch_width", G.dispatch_width, 1, Limits::kDispatchWidthMax);
  if (G.micro_op_buffer_size != D.micro_op_buffer_size)
    checkRange("globals", "micro_op_buffer_size", G.micro_op_buffer_size,
               Limits::kMicroOpBufferMin, Limits::kMicroOpBufferMax);
  T->SM.IssueWidth = G.dispatch_width;
  T->SM.MicroOpBufferSize = G.micro_op_buffer_size;
  if (E.SM->hasExtraProcessorInfo()) {
    // The reorder buffer is sized by ExtraProcessorInfo when the model gives one.
    T->EPI = E.SM->getExtraProcessorInfo();
    if (T->EPI.ReorderBufferSize && G.micro_op_buffer_size != D.micro_op_buffer_size)
      T->EPI.ReorderBufferSize = G.micro_op_buffer_size;
    T->SM.ExtraProcessorInfo = &T->EPI;
  }

  const unsigned N = E.NumClasses;
  T->Classes.assign(E.SM->SchedClassTable, E.SM->SchedClassTable + N);
  T->Classes.insert(T->Classes.end(), E.SM->SchedClassTable, E.SM->SchedClassTable + N);
  T->WPR.assign(E.WPR, E.WPR + E.NumWPR);
  T->WL.assign(E.WL, E.WL + E.NumWL);
  T->RA.assign(E.RA, E.RA + E.NumRA);

  std::unordered_map<std::string, unsigned> ByContent;  // identical rows share a class
  for (const Row &R : rows) {
    const std::string Where = "opcode '" + R.key + "'";
    size_t Hash = R.key.find('#');
    auto OIt = E.OpcodeByName.find(R.key.substr(0, Hash));
    if (OIt == E.OpcodeByName.end()) invalid(Where, "no such opcode in LLVM " LLVM_VERSION_STRING);
    unsigned O = OIt->second, S = E.staticClass(O), C = S;
    if (Hash != std::string::npos) {
      try {
        C = std::stoul(R.key.substr(Hash + 1));
      } catch (const std::exception &) {
        invalid(Where, "malformed variant suffix");
      }
    }
    if (!E.isValidClass(S) || C >= N || !E.isValidClass(C))
      invalid(Where, "the " + E.Mcpu + " model has no scheduling class for it");
    if (E.SM->getSchedClassDesc(C)->isVariant())
      invalid(Where, "variant opcode: name one resolution as OPCODE#CLASS");
    const MCSchedClassDesc &Orig = *E.SM->getSchedClassDesc(C);

    checkRange(Where, "uops", R.uops, 0, Limits::kUopsMax);
    if (R.latency.size() > 64) invalid(Where, "more than 64 latency entries");
    for (size_t I = 0; I < R.latency.size(); ++I)
      checkRange(Where, "latency[" + std::to_string(I) + "]", R.latency[I], 0, Limits::kLatencyMax);
    for (const ReadAdvance &A : R.read_advance) {
      checkRange(Where, "read_advance.use", A.use, 0, 255);
      checkRange(Where, "read_advance.write", A.write_id, 0, 65535);
      checkRange(Where, "read_advance[" + std::to_string(A.use) + "]", A.cycles,
                 Limits::kReadAdvanceMin, Limits::kReadAdvanceMax);
    }
    std::vector<std::pair<unsigned, int>> Uses;
    for (const auto &[Name, Cy] : R.ports) {
      auto RIt = E.ResourceByName.find(Name);
      if (RIt == E.ResourceByName.end())
        invalid(Where, "no processor resource '" + Name + "' in the " + E.Mcpu + " model");
      checkRange(Where, "ports." + Name, Cy, 0, Limits::kPortCyclesMax);
      for (const auto &U : Uses)
        if (U.first == RIt->second) invalid(Where, "resource '" + Name + "' listed twice");
      Uses.push_back({RIt->second, Cy});
    }
    // MCA issues a row's resources one after another; with two partially
    // overlapping groups it can pick a unit the other one needed and crash.
    // Resources with cycles must be pairwise nested or disjoint, unless LLVM's
    // own row for this class already pairs them.
    std::set<std::string> OwnPorts;
    for (const auto &[Name, Cy] : rowFromClass(E, "", C).ports)
      if (Cy) OwnPorts.insert(Name);
    auto Own = [&](unsigned Res) { return OwnPorts.count(E.SM->getProcResource(Res)->Name) > 0; };
    for (size_t I = 0; I < Uses.size(); ++I)
      for (size_t J = I + 1; J < Uses.size(); ++J) {
        uint64_t A = E.normalized(Uses[I].first), B = E.normalized(Uses[J].first);
        if (Uses[I].second && Uses[J].second && (A & B) && (A & B) != A && (A & B) != B &&
            !(Own(Uses[I].first) && Own(Uses[J].first)))
          invalid(Where, "ports: '" + std::string(E.SM->getProcResource(Uses[I].first)->Name) +
                             "' and '" + E.SM->getProcResource(Uses[J].first)->Name +
                             "' partially overlap (give cycles to nested or disjoint resources only)");
      }
    // Re-expand: a group's stored cycles include those of the resources inside it.
    E.sortByMask(Uses);
    std::vector<MCWriteProcResEntry> W;
    for (size_t J = 0; J < Uses.size(); ++J) {
      int Expanded = Uses[J].second;
      for (size_t I = 0; I < J; ++I)
        if (E.containedIn(Uses[I].first, Uses[J].first)) Expanded += Uses[I].second;
      if (!Expanded) continue;
      MCWriteProcResEntry X{};
      X.ProcResourceIdx = Uses[J].first;
      for (unsigned K = 0; K < Orig.NumWriteProcResEntries; ++K)  // keep acquire cycles
        if (E.WPR[Orig.WriteProcResIdx + K].ProcResourceIdx == X.ProcResourceIdx)
          X = E.WPR[Orig.WriteProcResIdx + K];
      setWprCycles(X, Expanded);
      W.push_back(X);
    }
    if (R.uops == 0 && !W.empty())
      invalid(Where, "uops = 0 while the port map uses resources (LLVM rejects such instructions)");

    std::vector<MCWriteLatencyEntry> L;
    for (size_t I = 0; I < R.latency.size(); ++I) {
      MCWriteLatencyEntry X{};
      X.Cycles = R.latency[I];
      X.WriteResourceID =
          I < Orig.NumWriteLatencyEntries ? E.WL[Orig.WriteLatencyIdx + I].WriteResourceID : 0;
      L.push_back(X);
    }
    std::vector<MCReadAdvanceEntry> A;
    for (const ReadAdvance &X : R.read_advance)
      A.push_back(MCReadAdvanceEntry{(unsigned)X.use, (unsigned)X.write_id, X.cycles});

    std::string Content;
    auto put = [&](long V) { Content += std::to_string(V) + ","; };
    put(R.uops), put(Orig.BeginGroup), put(Orig.EndGroup), put(Orig.RetireOOO), Content += "|";
    for (auto &X : W) put(X.ProcResourceIdx), put(wprCycles(X));
    Content += "|";
    for (auto &X : L) put(X.Cycles), put(X.WriteResourceID);
    Content += "|";
    for (auto &X : A) put(X.UseIdx), put(X.WriteResourceID), put(X.Cycles);

    auto [It, New] = ByContent.try_emplace(Content, (unsigned)T->Classes.size());
    if (New) {
      MCSchedClassDesc Desc = Orig;
      Desc.NumMicroOps = R.uops;
      Desc.WriteProcResIdx = T->WPR.size();
      Desc.NumWriteProcResEntries = W.size();
      Desc.WriteLatencyIdx = T->WL.size();
      Desc.NumWriteLatencyEntries = L.size();
      Desc.ReadAdvanceIdx = T->RA.size();
      Desc.NumReadAdvanceEntries = A.size();
      T->WPR.insert(T->WPR.end(), W.begin(), W.end());
      T->WL.insert(T->WL.end(), L.begin(), L.end());
      T->RA.insert(T->RA.end(), A.begin(), A.end());
      if (T->WPR.size() > 65535 || T->WL.size() > 65535 || T->RA.size() > 65535)
        invalid(Where, "the table needs more than 65535 scheduling entries (LLVM's 16-bit "
                       "indices); pass only the rows of the blocks being simulated");
      T->Classes.push_back(Desc);
    }
    T->Private[(uint64_t(O) << 32) | C] = It->second;
    T->Classes[S].NumMicroOps = MCSchedClassDesc::VariantNumMicroOps;  // route O through the hook
  }
  T->SM.SchedClassTable = T->Classes.data();
  T->SM.NumSchedClasses = T->Classes.size();
  T->ProcDesc.push_back(SubtargetSubTypeKV{E.Mcpu.c_str(), FeatureBitArray({}), FeatureBitArray({}), &T->SM});
  T->STI = std::make_unique<OverrideSubtargetInfo>(E, T->ProcDesc, T->WPR.data(), T->WL.data(),
                                                   T->RA.data(), T->Private);
  if (T->STI->getFeatureBits() != E.STI->getFeatureBits() || &T->STI->getSchedModel() != &T->SM)
    throw std::runtime_error("internal: the overriding subtarget does not match " + E.Mcpu);
  return Table{T};
}

// ---------------------------------------------------------------- simulate

static std::pair<int64_t, std::string> simulateOne(const EngineImpl &E, const BlockImpl &B,
                                                   const TableImpl &T, unsigned Iterations,
                                                   uint64_t Cap, bool FastForward) {
  if (!B.Error.empty()) return {-1, "bad block: " + B.Error};
  const MCSubtargetInfo &STI = *T.STI;
#if LLVM_VERSION_MAJOR >= 19
  std::unique_ptr<mca::InstrumentManager> IM(E.TheTarget->createInstrumentManager(STI, *E.MCII));
  if (!IM) IM = std::make_unique<mca::InstrumentManager>(STI, *E.MCII);
  mca::InstrBuilder IB(STI, *E.MCII, *E.MRI, E.MCIA.get(), *IM, kCallLatency);
  const SmallVector<mca::Instrument *> NoInstruments;
#else
  mca::InstrBuilder IB(STI, *E.MCII, *E.MRI, E.MCIA.get());
#endif
  std::unique_ptr<mca::InstrPostProcess> IPP(E.TheTarget->createInstrPostProcess(STI, *E.MCII));
  if (!IPP) IPP = std::make_unique<mca::InstrPostProcess>(STI, *E.MCII);
  SmallVector<std::unique_ptr<mca::Instruction>> Lowered;
  for (size_t I = 0; I < B.Insts.size(); ++I) {
#if LLVM_VERSION_MAJOR >= 19
    auto Inst = IB.createInstruction(B.Insts[I], NoInstruments);
#else
    auto Inst = IB.createInstruction(B.Insts[I]);
#endif
    if (!Inst) return {-1, errorText(Inst.takeError()) + ": " + B.Text[I]};
    IPP->postProcessInstruction(Inst.get(), B.Insts[I]);
    Lowered.emplace_back(std::move(Inst.get()));
  }
#if LLVM_VERSION_MAJOR >= 19
  mca::CircularSourceMgr S(Lowered, Iterations);
#else
  mca::SourceMgr S(Lowered, Iterations);
#endif
  std::unique_ptr<mca::CustomBehaviour> CB(E.TheTarget->createCustomBehaviour(STI, S, *E.MCII));
  if (!CB) CB = std::make_unique<mca::CustomBehaviour>(STI, S, *E.MCII);
  mca::Context Ctx(*E.MRI, STI);
  mca::PipelineOptions PO(0, 0, 0, 0, 0, 0, /*NoAlias=*/true);
  auto P = Ctx.createDefaultPipeline(PO, S, *CB);
  auto Monitor = std::make_unique<MonitorStage>(Cap, Lowered.size(), Iterations, FastForward);
  MonitorStage &M = *Monitor;
  P->addEventListener(&M);
  P->appendStage(std::move(Monitor));
  Expected<unsigned> Cycles = P->run();
  if (!Cycles) {
    std::string Why = errorText(Cycles.takeError());
    if (M.Extrapolated >= 0) return {M.Extrapolated, "ok"};
    return {-1, Why};
  }
  return {(int64_t)*Cycles, "ok"};
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
  SimResult Out{std::vector<int64_t>(N, -1), std::vector<std::string>(N)};
  std::atomic<size_t> Next{0};
  auto Work = [&] {
    for (size_t I; (I = Next++) < N;) {
      try {
        auto [C, St] = simulateOne(*impl_, *blocks[block_idx[I]].impl, *tables[table_idx[I]].impl,
                                   iterations, cycle_cap, fast_forward);
        Out.cycles[I] = C;
        Out.status[I] = std::move(St);
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

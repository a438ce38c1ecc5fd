// Blocks: machine code decoded (or assembly parsed) into MCInsts, with each
// instruction's printed text, parameter-row key and operands.
#include "dtlb_miss.h"
#include "engine_impl.h"
#include "forwarded_load.h"
#include "front_end.h"
#include "partial_register.h"
#include "pointer_chasing.h"
#include "slow_lea.h"
#include "serialising.h"
#include "stack_engine.h"

#include "llvm/MC/MCCodeEmitter.h"
#include "llvm/MC/MCFixup.h"
#include "llvm/MC/MCObjectFileInfo.h"
#include "llvm/MC/MCParser/MCAsmParser.h"
#include "llvm/MC/MCParser/MCTargetAsmParser.h"
#include "llvm/MC/MCStreamer.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace dt {
namespace {

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

// A zero idiom in its other encoding as the idiom's own opcode: the disassembler
// gives `xorl %r13d, %r13d` encoded 45 33 ed as XOR32rr_REV (the operands'
// roles swapped in the ModRM byte), which LLVM's models do not list as a zero
// idiom, so the register it clears seemed to depend on its last writer (BHive
// measures that block at 0.30 cycles an iteration on Haswell, a one-cycle chain
// predicted 1.0). The assembler encodes the text as XOR32rr, so llvm-mca on the
// block's text sees the idiom: LLVM's own predicate decides, on the twin opcode
// with the same operands (the bytes, and so the front end's lengths, are kept).
MCInst canonicalIdiom(const EngineImpl &E, const MCInst &MI) {
  const StringRef Name = E.MCII->getName(MI.getOpcode());
  if (!Name.ends_with("_REV")) return MI;
  const auto Twin = E.OpcodeByName.find(Name.drop_back(4));
  if (Twin == E.OpcodeByName.end()) return MI;
  MCInst Out = MI;
  Out.setOpcode(Twin->second);
  APInt Mask;
  return E.MCIA->isZeroIdiom(Out, Mask, E.SM->getProcessorID()) ? Out : MI;
}

// Each instruction's parameter-row key, from the class LLVM's model resolves it to.
void finishBlock(const EngineImpl &E, BlockImpl &B) {
  for (const MCInst &MI : B.Insts) {
    unsigned R = E.resolve(MI);
    B.Keys.push_back(E.rowKey(MI.getOpcode(), R ? R : E.staticClass(MI.getOpcode())));
  }
}

// Dependencies are on whole registers: the widest super-register.
std::string widest(const MCRegisterInfo &MRI, MCRegister R) {
  MCRegister Top = R;
  for (MCSuperRegIterator S(R, &MRI); S.isValid(); ++S)
    if (!MCSuperRegIterator(*S, &MRI).isValid()) Top = *S;
  return MRI.getName(Top);
}

// Parsed text has no bytes: encode each instruction (a symbol's fixup leaves its
// field zero, which does not change the length).
void encode(const EngineImpl &E, MCContext &Ctx, BlockImpl &B) {
  std::unique_ptr<MCCodeEmitter> CE(E.TheTarget->createMCCodeEmitter(*E.MCII, Ctx));
  static const char *Digits = "0123456789abcdef";
  for (const MCInst &MI : B.Insts) {
    SmallVector<char, 16> Bytes;
    SmallVector<MCFixup, 2> Fixups;
#if LLVM_VERSION_MAJOR >= 17
    CE->encodeInstruction(MI, Bytes, Fixups, *E.STI);
#else
    raw_svector_ostream OS(Bytes);
    CE->encodeInstruction(MI, OS, Fixups, *E.STI);
#endif
    std::string Hex;
    for (char C : Bytes) Hex += {Digits[(uint8_t)C >> 4], Digits[(uint8_t)C & 15]};
    B.Encoding.push_back(std::move(Hex));
  }
}

// The full registers mergePartialWrites makes the instruction read, from its
// MCInst: a write that does not clear its super-register (as MCA's InstrBuilder
// asks the target) of a part of one, not read by the instruction. Loads and
// dependency-breaking idioms merge nothing: the caller asks only for the others.
std::vector<std::string> partialMerges(const EngineImpl &E, const MCInst &MI, const MCInstrDesc &D) {
  std::vector<std::string> Out;
  SmallVector<MCRegister, 4> Defs, Uses;
  for (unsigned I = 0; I < MI.getNumOperands(); ++I)
    if (MI.getOperand(I).isReg() && MI.getOperand(I).getReg())
      (I < D.getNumDefs() ? Defs : Uses).push_back(MI.getOperand(I).getReg());
  Defs.resize(D.getNumDefs());
  for (MCPhysReg R : D.implicit_defs()) Defs.push_back(R);
  for (MCPhysReg R : D.implicit_uses()) Uses.push_back(R);
  APInt Clears(D.getNumDefs() + D.implicit_defs().size(), 0);
  E.MCIA->clearsSuperRegisters(*E.MRI, MI, Clears);
  for (unsigned I = 0; I < Defs.size(); ++I) {
    const MCRegister Full = Clears[I] ? MCRegister() : mergedInto(E, Defs[I]);
    if (!Full || llvm::any_of(Uses, [&](MCRegister U) { return E.MRI->regsOverlap(U, Defs[I]); })) continue;
    const std::string Name = widest(*E.MRI, Full);
    if (!llvm::is_contained(Out, Name)) Out.push_back(Name);
  }
  return Out;
}

}  // namespace

InstrOperands instrOperands(const EngineImpl &E, const MCInst &MI) {
  InstrOperands O;
  const MCInstrDesc &D = E.MCII->get(MI.getOpcode());
  O.may_load = D.mayLoad();
  O.may_store = D.mayStore();
  APInt Mask;
  O.dependency_breaking = E.MCIA->isZeroIdiom(MI, Mask, E.SM->getProcessorID()) ||
                          E.MCIA->isDependencyBreaking(MI, Mask, E.SM->getProcessorID());
  O.stack_op = isStackOp(E, MI);
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
  if (!O.may_load && !O.dependency_breaking) O.merges = partialMerges(E, MI, D);
  for (auto *V : {&O.reads, &O.writes}) {
    std::sort(V->begin(), V->end());
    V->erase(std::unique(V->begin(), V->end()), V->end());
  }
  return O;
}

std::string EngineImpl::printInst(const MCInst &MI) {
  std::string S;
  raw_string_ostream OS(S);
  IP->printInst(&MI, 0, "", *STI, OS);
  OS.flush();
  size_t B = S.find_first_not_of(" \t");
  S = B == std::string::npos ? "" : S.substr(B);
  std::replace(S.begin(), S.end(), '\t', ' ');
  return S;
}

Block Engine::disassemble(const std::string &hex) const {
  EngineImpl &E = *impl_;
  auto B = std::make_shared<BlockImpl>();
  B->Engine = impl_;
  B->Source = hex;
  B->FromHex = true;
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
    B->Insts.push_back(canonicalIdiom(E, MI));
    B->Text.push_back(E.printInst(MI));
    B->Encoding.push_back(hex.substr(2 * Off, 2 * Size));
    Off += Size;
  }
  finishBlock(E, *B);
  return Block{B};
}

Block Engine::parse_asm(const std::string &text) const {
  EngineImpl &E = *impl_;
  auto B = std::make_shared<BlockImpl>();
  B->Engine = impl_;
  B->Source = text;
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
  encode(E, *B->Ctx, *B);
  finishBlock(E, *B);
  return Block{B};
}

bool Block::ok() const { return impl && impl->Error.empty(); }
const std::string &Block::error() const { return impl->Error; }
size_t Block::size() const { return impl->Insts.size(); }
std::vector<std::string> Block::asm_lines() const { return impl->Text; }
std::vector<std::string> Block::row_keys() const { return impl->Keys; }

std::pair<std::string, std::string> Block::source() const {
  return {impl->FromHex ? "hex" : "asm", impl->Source};
}
std::vector<std::string> Block::encoding() const { return impl->Encoding; }

Block Block::with_accesses(const std::vector<Access> &accesses, bool exact, bool one_page) const {
  auto B = std::make_shared<BlockImpl>(*impl);
  B->Memory = nullptr;
  if (accesses.empty() || !ok()) return Block{B};
  auto M = std::make_shared<MemoryMap>();
  M->Exact = exact;
  M->OnePage = exact && one_page;
  M->All = accesses;
  std::stable_sort(M->All.begin(), M->All.end(), [](const Access &A, const Access &C) {
    return std::make_pair(A.iteration, A.instr) < std::make_pair(C.iteration, C.instr);
  });
  int Iterations = 0;
  for (const Access &A : M->All) {
    if (A.instr < 0 || (size_t)A.instr >= impl->Insts.size())
      throw std::invalid_argument("access of instruction " + std::to_string(A.instr) +
                                  ": the block has " + std::to_string(impl->Insts.size()));
    if (A.iteration < 0 || A.iteration > 1000)
      throw std::invalid_argument("access in iteration " + std::to_string(A.iteration) +
                                  ": iterations are 0..1000");
    if (A.size < 1 || A.size > 4096)
      throw std::invalid_argument("access of " + std::to_string(A.size) + " bytes: 1..4096");
    Iterations = std::max(Iterations, A.iteration + 1);
  }
  M->ByInstr.assign(impl->Insts.size(), std::vector<std::vector<Access>>(Iterations));
  for (const Access &A : M->All) M->ByInstr[A.instr][A.iteration].push_back(A);
  B->Memory = M;
  M->Forwarded = forwardedLoads(*impl->Engine, *B);
  M->DtlbMissed = dtlbMisses(*impl->Engine, *B);
  return Block{B};
}

std::vector<std::tuple<int, int, bool>> Block::front_end() const {
  std::vector<std::tuple<int, int, bool>> Out;
  if (!ok()) return Out;
  for (const StaticFrontEnd &F : staticFrontEnd(*impl->Engine, *impl))
    Out.emplace_back(F.bytes, F.micro_fused, F.macro_fused);
  return Out;
}

std::vector<std::tuple<bool, bool, bool>> Block::serialising() const {
  std::vector<std::tuple<bool, bool, bool>> Out;
  if (!ok()) return Out;
  const std::vector<bool> Assist = zeroShiftAssists(*impl->Engine, *impl, exact_accesses());
  const std::vector<bool> Locked = lockedInstructions(*impl->Engine, *impl);
  const std::vector<bool> X87 = x87StackFaults(*impl->Engine, *impl);
  for (size_t I = 0; I < Assist.size(); ++I) Out.emplace_back(Assist[I], Locked[I], X87[I]);
  return Out;
}

bool Block::exact_accesses() const { return impl->Memory && impl->Memory->Exact; }
bool Block::one_page_accesses() const { return impl->Memory && impl->Memory->OnePage; }

std::vector<Access> Block::accesses() const {
  return impl->Memory ? impl->Memory->All : std::vector<Access>();
}

std::vector<std::string> Block::opcodes() const {
  std::vector<std::string> R;
  for (const MCInst &MI : impl->Insts) R.push_back(impl->Engine->MCII->getName(MI.getOpcode()).str());
  return R;
}

std::vector<InstrOperands> Block::operands() const {
  std::vector<InstrOperands> Out;
  for (const MCInst &MI : impl->Insts) Out.push_back(instrOperands(*impl->Engine, MI));
  const std::vector<bool> Chases = pointerChases(*impl->Engine, *impl);
  for (size_t I = 0; I < Out.size(); ++I) {
    Out[I].pointer_chase = Chases[I];
    Out[I].slow_lea = slowLea(*impl->Engine, impl->Insts[I]);
  }
  return Out;
}

}  // namespace dt

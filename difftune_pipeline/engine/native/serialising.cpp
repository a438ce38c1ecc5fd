#include "serialising.h"

#include <cctype>
#include <regex>

using namespace llvm;

namespace dt {
namespace {

// SHL/SHR/SAR/ROL/ROR/RCL/RCR and SHLD/SHRD by an immediate or CL, on a register
// or memory: the name's width and the count's kind.
struct Shift {
  bool Is = false, ByCl = false;
  unsigned Width = 0;
};

Shift shiftOf(const EngineImpl &E, const MCInst &MI) {
  static const std::regex Name(
      "(?:SHL|SHR|SAR|ROL|ROR|RCL|RCR|SHLD|SHRD)(8|16|32|64)(ri|mi|rri8|mri8|rCL|mCL|rrCL|mrCL)");
  std::smatch M;
  const std::string Op = E.MCII->getName(MI.getOpcode()).str();
  if (!std::regex_match(Op, M, Name)) return {};
  return {true, StringRef(M[2].str()).ends_with("CL"), (unsigned)std::stoi(M[1].str())};
}

bool zeroCount(const EngineImpl &E, const MCInst &MI, bool ClZero) {
  const Shift S = shiftOf(E, MI);
  if (!S.Is) return false;
  if (S.ByCl) return ClZero;
  const MCOperand &Count = MI.getOperand(MI.getNumOperands() - 1);
  return Count.isImm() && (Count.getImm() & (S.Width == 64 ? 63 : 31)) == 0;
}

}  // namespace

std::vector<bool> zeroShiftAssists(const EngineImpl &E, const BlockImpl &B, bool ClZero) {
  const size_t N = B.Insts.size();
  std::vector<bool> ReadsFlags(N), WritesFlags(N), Zero(N), Out(N);
  for (size_t I = 0; I < N; ++I) {
    const InstrOperands O = instrOperands(E, B.Insts[I]);
    ReadsFlags[I] = std::count(O.reads.begin(), O.reads.end(), "EFLAGS") > 0;
    WritesFlags[I] = std::count(O.writes.begin(), O.writes.end(), "EFLAGS") > 0;
    ClZero = ClZero && std::count(O.writes.begin(), O.writes.end(), "RCX") == 0;
  }
  for (size_t I = 0; I < N; ++I) Zero[I] = WritesFlags[I] && zeroCount(E, B.Insts[I], ClZero);
  for (size_t I = 0; I < N; ++I) {
    if (!ReadsFlags[I] || Zero[I]) continue;  // RCL and RCR by zero read the carry unassisted
    for (size_t Back = 1; Back <= N; ++Back) {  // the last flags writer, around the loop
      const size_t J = (I + N - Back) % N;
      if (WritesFlags[J]) {
        Out[I] = Zero[J];
        break;
      }
    }
  }
  return Out;
}

std::vector<bool> lockedInstructions(const EngineImpl &E, const BlockImpl &B) {
  static const std::regex Xchg("XCHG(8|16|32|64)rm");
  auto prefixed = [](const std::string &Hex) {  // F0 among the legacy prefixes
    for (size_t I = 0; I + 2 <= Hex.size(); I += 2) {
      std::string Byte = Hex.substr(I, 2);
      for (char &C : Byte) C = (char)std::tolower((unsigned char)C);
      if (Byte == "f0") return true;
      if (Byte != "f2" && Byte != "f3" && Byte != "2e" && Byte != "36" && Byte != "3e" && Byte != "26" &&
          Byte != "64" && Byte != "65" && Byte != "66" && Byte != "67")
        return false;
    }
    return false;
  };
  const size_t N = B.Insts.size();
  std::vector<bool> Out(N);
  for (size_t I = 0; I < N; ++I) {
    const std::string Op = E.MCII->getName(B.Insts[I].getOpcode()).str();
    if (Op == "LOCK_PREFIX") continue;
    const bool AfterPrefix = I > 0 && E.MCII->getName(B.Insts[I - 1].getOpcode()) == "LOCK_PREFIX";
    Out[I] = AfterPrefix || prefixed(B.Encoding[I]) || std::regex_match(Op, Xchg);
  }
  return Out;
}

namespace {

// What one instruction does to the x87 register stack (Intel SDM vol. 1, 8.1.2
// and 8.5.1.1), from its LLVM name and the ST(i) registers LLVM lists it reading.
struct X87Effect {
  bool Touches = false;     // reads, writes, pushes or pops the stack
  bool Reset = false;       // leaves every register empty, TOP 0 (fninit, emms, state loads)
  bool Mmx = false;         // an MMX instruction: every register valid, TOP 0
  int Top = 0;              // fincstp (+1) and fdecstp (-1): TOP moves, the tags stay
  std::vector<int> Reads;   // ST(i) read, relative to TOP before the instruction
  std::vector<int> Writes;  // ST(i) written (valid afterwards, even by the masked response)
  std::vector<int> Frees;   // ST(i) tagged empty (ffree)
  int Pushes = 0, Pops = 0;
};

X87Effect x87Effect(const EngineImpl &E, const MCInst &MI) {
  static const std::regex Quiet("XAM_F|FNSTSW.*|FNSTCW16m|FLDCW16m|FNCLEX|WAIT|FNOP|FXSAVE.*|FSTENVm");
  static const std::regex Reset("FNINIT|FSAVEm|FRSTORm|FXRSTOR.*|FLDENVm|MMX_EMMS|FEMMS");
  static const std::regex PushConstant("LD_F(32m|64m|80m|0|1)|ILD_F(16|32|64)m|FLD(PI|L2E|L2T|LG2|LN2)|FBLDm");
  static const std::regex PushAfter("FPTAN|FSINCOS|FXTRACT");  // ST0 replaced, then one more pushed
  static const std::regex Pop2("FCOMPP|UCOM_FPPr");
  static const std::regex Pop(
      "ST_FP(32m|64m|80m|rr)|ISTT?_FP(16|32|64)m|FBSTPm|(ADD|MUL|SUBR?|DIVR?)_FPrST0|COMP_FST0r|UCOM_FPr|"
      "U?COM_FIPr|FI?COMP(16|32|64)m|FPATAN|FYL2X(P1)?");
  static const std::regex ReadsSt1("FCOMPP|UCOM_FPPr|FSCALE|FPREM1?|FPATAN|FYL2X(P1)?");
  static const std::regex NoResult(
      "ST_FP?(32m|64m|80m)|ISTT?_FP?(16|32|64)m|FBSTPm|COMP?_FST0r|UCOM_FP{0,2}r|U?COM_FIP?r|FI?COMP?(16|32|64)m|"
      "TST_F|FCOMPP");
  static const std::regex ToSti("(ADD|MUL|SUBR?|DIVR?)_FP?rST0|ST_FP?rr|XCH_F");
  const std::string Op = E.MCII->getName(MI.getOpcode()).str();
  const InstrOperands O = instrOperands(E, MI);
  X87Effect X;
  std::vector<int> Explicit;
  bool Mmx = false, Fpu = false;
  for (const std::vector<std::string> *Regs : {&O.reads, &O.writes})
    for (const std::string &R : *Regs) {
      Mmx = Mmx || (R.size() == 3 && R.compare(0, 2, "MM") == 0);
      Fpu = Fpu || R == "FPSW" || R == "FPCW";
    }
  for (const std::string &R : O.reads)
    if (R.size() == 3 && R.compare(0, 2, "ST") == 0) Explicit.push_back(R[2] - '0');
  if (std::regex_match(Op, Reset)) {
    X.Touches = X.Reset = true;
    return X;
  }
  if (Mmx) {
    X.Touches = X.Mmx = true;
    return X;
  }
  if (!Fpu || std::regex_match(Op, Quiet)) return X;
  X.Touches = true;
  if (Op == "FINCSTP" || Op == "FDECSTP") {
    X.Top = Op == "FINCSTP" ? 1 : -1;
    return X;
  }
  if (Op == "FFREE" || Op == "FFREEP") {
    X.Frees = Explicit;
    X.Pops = Op == "FFREEP";
    return X;
  }
  if (std::regex_match(Op, PushConstant)) {
    X.Pushes = 1;
    return X;
  }
  if (Op == "LD_Frr") {
    X.Reads = Explicit;
    X.Pushes = 1;
    return X;
  }
  X.Reads = Explicit;
  X.Reads.push_back(0);
  if (std::regex_match(Op, ReadsSt1)) X.Reads.push_back(1);
  if (std::regex_match(Op, ToSti)) X.Writes = Explicit;
  else if (Op == "FPATAN" || Op == "FYL2X" || Op == "FYL2XP1") X.Writes = {1};
  else if (!std::regex_match(Op, NoResult)) X.Writes = {0};
  if (Op == "XCH_F") X.Writes.push_back(0);
  X.Pushes = std::regex_match(Op, PushAfter) ? 1 : 0;
  X.Pops = std::regex_match(Op, Pop2) ? 2 : std::regex_match(Op, Pop) ? 1 : 0;
  return X;
}

}  // namespace

std::vector<bool> x87StackFaults(const EngineImpl &E, const BlockImpl &B) {
  const size_t N = B.Insts.size();
  std::vector<X87Effect> Effects;
  bool Any = false;
  for (const MCInst &MI : B.Insts) {
    Effects.push_back(x87Effect(E, MI));
    Any = Any || Effects.back().Touches;
  }
  std::vector<bool> Out(N);
  if (!Any) return Out;
  unsigned Top = 0, Valid = 0;  // the harness starts with the stack empty; bit r: physical register r valid
  auto at = [&](int I) { return (Top + (unsigned)I) & 7; };
  for (int Iteration = 0; Iteration < X87_ITERATIONS; ++Iteration)
    for (size_t I = 0; I < N; ++I) {
      const X87Effect &X = Effects[I];
      bool Fault = false;
      if (X.Reset || X.Mmx) {
        Top = 0;
        Valid = X.Mmx ? 0xFF : 0;
      }
      Top = (Top + (unsigned)X.Top) & 7;
      for (int R : X.Reads) Fault = Fault || !(Valid >> at(R) & 1);  // underflow
      for (int R : X.Writes) Valid |= 1u << at(R);
      for (int R : X.Frees) Valid &= ~(1u << at(R));
      for (int P = 0; P < X.Pushes; ++P) {
        Top = (Top + 7) & 7;
        Fault = Fault || (Valid >> Top & 1);  // overflow
        Valid |= 1u << Top;
      }
      for (int P = 0; P < X.Pops; ++P) {
        Valid &= ~(1u << Top);
        Top = (Top + 1) & 7;
      }
      if (Iteration == X87_ITERATIONS - 1) Out[I] = Fault;
    }
  return Out;
}

std::vector<int> serialisingDrains(const EngineImpl &E, const BlockImpl &B, const Globals &G) {
  std::vector<int> Out(B.Insts.size(), -1);
  auto add = [&](const std::vector<bool> &Which, int Cycles) {
    for (size_t I = 0; I < Which.size(); ++I)
      if (Which[I]) Out[I] = std::max(Out[I], 0) + Cycles;
  };
  if (G.on("zero_shift")) add(zeroShiftAssists(E, B, B.Memory && B.Memory->Exact), G.param("zero_shift_penalty"));
  if (G.on("locked")) add(lockedInstructions(E, B), G.param("lock_penalty"));
  if (G.on("x87_stack")) add(x87StackFaults(E, B), G.param("x87_assist_penalty"));
  return Out;
}

}  // namespace dt

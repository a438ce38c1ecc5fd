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

std::vector<int> serialisingDrains(const EngineImpl &E, const BlockImpl &B, const Globals &G) {
  std::vector<int> Out(B.Insts.size(), -1);
  auto add = [&](const std::vector<bool> &Which, int Cycles) {
    for (size_t I = 0; I < Which.size(); ++I)
      if (Which[I]) Out[I] = std::max(Out[I], 0) + Cycles;
  };
  if (G.on("zero_shift")) add(zeroShiftAssists(E, B, B.Memory && B.Memory->Exact), G.param("zero_shift_penalty"));
  if (G.on("locked")) add(lockedInstructions(E, B), G.param("lock_penalty"));
  return Out;
}

}  // namespace dt

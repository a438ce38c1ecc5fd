// The LLVM-facing state behind the public handles of engine_core.h: the CPU's
// MC objects and original scheduling tables (EngineImpl), a decoded block
// (BlockImpl) and a compiled table (TableImpl). Built without RTTI, like LLVM;
// never included by the bindings.
#pragma once

#include "engine_core.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCDisassembler/MCDisassembler.h"
#include "llvm/MC/MCInst.h"
#include "llvm/MC/MCInstPrinter.h"
#include "llvm/MC/MCInstrAnalysis.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCSchedule.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCTargetOptions.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/SourceMgr.h"
#if LLVM_VERSION_MAJOR >= 16
#include "llvm/TargetParser/Triple.h"
#else
#include "llvm/ADT/Triple.h"
#endif

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace dt {

constexpr const char *kTriple = "x86_64-unknown-linux-gnu";

#if LLVM_VERSION_MAJOR >= 18
inline unsigned wprCycles(const llvm::MCWriteProcResEntry &E) { return E.ReleaseAtCycle; }
inline void setWprCycles(llvm::MCWriteProcResEntry &E, unsigned C) { E.ReleaseAtCycle = C; }
#else
inline unsigned wprCycles(const llvm::MCWriteProcResEntry &E) { return E.Cycles; }
inline void setWprCycles(llvm::MCWriteProcResEntry &E, unsigned C) { E.Cycles = C; }
#endif

[[noreturn]] inline void invalid(const std::string &Where, const std::string &What) {
  throw InvalidTable(Where + ": " + What);
}

// Explicit cycles per processor resource index.
using PortUses = std::vector<std::pair<unsigned, int>>;

// Resources partially overlap when their unit sets (normalized masks)
// intersect and neither contains the other: the one shape of port map that
// compile() refuses and nested_ports() repairs.
inline bool partiallyOverlap(uint64_t A, uint64_t B) {
  const uint64_t Both = A & B;
  return Both && Both != A && Both != B;
}

struct EngineImpl {
  std::string Mcpu;
  llvm::Triple TT{kTriple};
  const llvm::Target *TheTarget = nullptr;
  std::unique_ptr<llvm::MCRegisterInfo> MRI;
  std::unique_ptr<llvm::MCAsmInfo> MAI;
  std::unique_ptr<llvm::MCInstrInfo> MCII;
  std::unique_ptr<llvm::MCSubtargetInfo> STI;
  std::unique_ptr<llvm::MCInstrAnalysis> MCIA;
  llvm::MCTargetOptions MCOptions;
  std::unique_ptr<llvm::MCContext> DisCtx;
  std::unique_ptr<llvm::MCDisassembler> Dis;
  std::unique_ptr<llvm::MCInstPrinter> IP;
  std::mutex Mu;  // serialises disassembly, parsing and printing

  const llvm::MCSchedModel *SM = nullptr;
  unsigned NumClasses = 0;
  const llvm::MCWriteProcResEntry *WPR = nullptr;
  const llvm::MCWriteLatencyEntry *WL = nullptr;
  const llvm::MCReadAdvanceEntry *RA = nullptr;
  size_t NumWPR = 0, NumWL = 0, NumRA = 0;
  std::vector<uint64_t> ResMask;  // mca's resource masks
  llvm::StringMap<unsigned> OpcodeByName, ResourceByName;

  unsigned staticClass(unsigned Opcode) const { return MCII->get(Opcode).getSchedClass(); }
  bool isValidClass(unsigned C) const { return C && SM->getSchedClassDesc(C)->isValid(); }
  // The concrete class LLVM's own model resolves an instruction to (0: none).
  unsigned resolve(const llvm::MCInst &MI) const {
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
  const char *resourceName(unsigned Res) const { return SM->getProcResource(Res)->Name; }
  // Sorted the way InstrBuilder sorts resource uses: units first, small groups first.
  void sortByMask(PortUses &V) const {
    std::sort(V.begin(), V.end(), [&](const auto &A, const auto &B) {
      uint64_t MA = ResMask[A.first], MB = ResMask[B.first];
      int PA = __builtin_popcountll(MA), PB = __builtin_popcountll(MB);
      return PA != PB ? PA < PB : MA < MB;
    });
  }
  // A resource's units: a group's mask without the group's own bit.
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
  std::string printInst(const llvm::MCInst &MI);  // one line, leading blanks dropped
  Generation Gen;  // the facts of the CPU's generation that the extended model's mechanisms read
  llvm::MCRegister RSP;  // the stack pointer (the stack engine's register)
  llvm::MCRegister EFLAGS;  // the flags (the bit tests' read under output_dependency)
  llvm::SmallVector<llvm::MCRegister, 16> Gpr64;  // RAX to R15 (partial-register writes)
};

constexpr int64_t kPage = 4096;  // bytes of a page

// A block's recorded memory accesses, by instruction and iteration.
struct MemoryMap {
  bool Exact = false;       // real addresses (4K aliasing is meaningful)
  bool OnePage = false;     // every virtual page backed by one physical page (BHive's harness)
  std::vector<Access> All;  // as given, sorted by (iteration, instruction)
  std::vector<std::vector<std::vector<Access>>> ByInstr;  // [instruction][iteration] -> accesses
  // What the addresses decide per instruction, whatever the table: computed once
  // when they are attached (Block::with_accesses), read by every simulation.
  std::vector<bool> Forwarded;   // a plain load the store buffer serves (forwarded_load)
  std::vector<bool> DtlbMissed;  // a load that misses the first-level DTLB (dtlb_miss)
};

// Whether two byte ranges share a byte; whether one access holds all of another's bytes.
inline bool overlap(uint64_t A, int ASize, uint64_t B, int BSize) { return A < B + BSize && B < A + ASize; }
inline bool contains(const Access &Outer, const Access &Inner) {
  return Outer.address <= Inner.address && Inner.address + Inner.size <= Outer.address + Outer.size;
}

// The accesses of instruction Instr in one iteration. Iterations past the
// recorded ones continue each access at the stride of the last two recorded.
inline std::vector<Access> accessesAt(const MemoryMap &M, size_t Instr, size_t Iteration) {
  const auto &ByIteration = M.ByInstr[Instr];
  const size_t K = ByIteration.size();
  if (Iteration < K || K == 0) return K ? ByIteration[Iteration] : std::vector<Access>();
  std::vector<Access> Out = ByIteration[K - 1];
  if (K >= 2 && ByIteration[K - 2].size() == Out.size())
    for (size_t J = 0; J < Out.size(); ++J)
      Out[J].address += (Iteration - K + 1) * (Out[J].address - ByIteration[K - 2][J].address);
  return Out;
}

// The MCInst operands of an instruction's address registers (X86's AddrBaseReg and
// AddrIndexReg of its memory operand); none for an implicit address (push, pop).
inline std::vector<unsigned> addressOperands(const llvm::MCInstrDesc &D) {
  for (unsigned Op = 0; Op < D.getNumOperands(); ++Op)
    if (D.operands()[Op].OperandType == llvm::MCOI::OPERAND_MEMORY) return {Op, Op + 2};
  return {};
}

// The registers an instruction reads and writes (widened), as Block.operands gives them.
InstrOperands instrOperands(const EngineImpl &E, const llvm::MCInst &MI);

struct BlockImpl {
  std::shared_ptr<const EngineImpl> Engine;
  std::shared_ptr<llvm::SourceMgr> Src;  // parsed text only: owns the buffer
  std::shared_ptr<llvm::MCContext> Ctx;  // parsed text only: owns operand expressions
  std::string Error;
  std::string Source;    // what the block was built from: its hex, or its assembly text
  bool FromHex = false;  // which of the two
  std::vector<llvm::MCInst> Insts;
  std::vector<std::string> Text, Keys;
  std::vector<std::string> Encoding;         // each instruction's bytes (hex)
  std::shared_ptr<const MemoryMap> Memory;   // null: no accesses recorded
};

struct TableImpl {
  std::shared_ptr<const EngineImpl> Engine;
  Globals G;  // the mechanisms of the extended model, and their parameters
  llvm::MCSchedModel SM;
  llvm::MCExtraProcessorInfo EPI;
  std::vector<llvm::MCSchedClassDesc> Classes;  // originals, untouched clones, private classes
  std::vector<llvm::MCWriteProcResEntry> WPR;
  std::vector<llvm::MCWriteLatencyEntry> WL;
  std::vector<llvm::MCReadAdvanceEntry> RA;
  std::unordered_map<uint64_t, unsigned> Private;  // (opcode << 32 | class) -> private class
  std::unordered_map<unsigned, unsigned> SlowLea;  // LEA opcode -> the class of its slow form (slow_lea)
  std::unordered_map<unsigned, unsigned> Folded;   // class -> the load cycles folded out of it (folded_load)
  std::vector<llvm::SubtargetSubTypeKV> ProcDesc;  // one entry: the CPU, over SM
  std::vector<llvm::MCRegisterFileDesc> RegisterFiles;  // move elimination's (EPI points here)
  std::vector<llvm::MCRegisterCostEntry> CostTable;
  std::unique_ptr<const llvm::MCSubtargetInfo> STI;  // an OverrideSubtargetInfo over the above
};

}  // namespace dt

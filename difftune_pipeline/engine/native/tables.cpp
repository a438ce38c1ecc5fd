// Parameter tables: LLVM's own rows as DiffTune parameters, and rows compiled
// back into scheduling tables.
//
// Overrides work without modifying LLVM: a compiled table is an MCSubtargetInfo
// built through its public constructor over owned copies of the CPU's
// WriteProcRes / WriteLatency / ReadAdvance / SchedClass tables. An overridden
// opcode's static class is marked variant in the copy, so InstrBuilder asks
// resolveVariantSchedClass, which resolves through the original X86 subtarget
// (its generated predicates) and then hands out the opcode's private class.
// Every other opcode resolves to an untouched clone of its class, so an edit
// never leaks to opcodes that share a scheduling class.
#include "override_subtarget.h"
#include "folded_load.h"
#include "move_elimination.h"
#include "ports.h"
#include "slow_lea.h"

#include <set>

using namespace llvm;

namespace dt {
namespace {

Row rowFromClass(const EngineImpl &E, std::string Key, unsigned C) {
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
  for (const auto &[Res, Cy] : explicitUses(E, D)) R.ports.push_back({E.resourceName(Res), Cy});
  return R;
}

void checkRange(const std::string &Where, const std::string &Param, long V, long Lo, long Hi) {
  if (V < Lo || V > Hi)
    invalid(Where, Param + " = " + std::to_string(V) + " is outside the valid range " +
                       std::to_string(Lo) + ".." + std::to_string(Hi));
}

void applyGlobals(const EngineImpl &E, const Globals &G, const Globals &Default, TableImpl &T) {
  checkRange("globals", "dispatch_width", G.dispatch_width, Limits::kDispatchWidthMin,
             Limits::kDispatchWidthMax);
  if (G.micro_op_buffer_size != Default.micro_op_buffer_size)
    checkRange("globals", "micro_op_buffer_size", G.micro_op_buffer_size,
               Limits::kMicroOpBufferMin, Limits::kMicroOpBufferMax);
  if (G.any() && E.Gen.mechanisms.empty())
    invalid("globals", "the extended model has no rules for " + E.Mcpu);
  for (const std::string &M : G.mechanisms) {
    const MechanismSpec *Spec = E.Gen.find(M);
    if (!Spec) {
      std::string Own;
      for (const MechanismSpec &X : E.Gen.mechanisms) Own += (Own.empty() ? "" : ", ") + X.name;
      invalid("globals", M + " is not a mechanism of " + E.Mcpu + " (" + E.Gen.name + "): one of " + Own);
    }
    for (const std::string &R : Spec->requires_on)
      if (!G.on(R)) invalid("globals", M + " needs " + R + " on");
    for (const auto &[P, Lo, Hi] : Spec->parameters) {
      auto It = G.parameters.find(P);
      if (It == G.parameters.end()) invalid("globals", P + " is missing (a parameter of " + M + ")");
      checkRange("globals", P, It->second, Lo, Hi);
    }
  }
  for (const auto &[P, V] : G.parameters) {
    bool Known = false;
    for (const std::string &M : G.mechanisms)
      for (const auto &Declared : E.Gen.find(M)->parameters) Known |= std::get<0>(Declared) == P;
    if (!Known) invalid("globals", P + " is not a parameter of the mechanisms that are on");
  }
  T.G = G;
  T.SM = *E.SM;
  T.SM.IssueWidth = G.dispatch_width;
  T.SM.MicroOpBufferSize = G.micro_op_buffer_size;
  if (E.SM->hasExtraProcessorInfo()) {
    // The reorder buffer is sized by ExtraProcessorInfo when the model gives one.
    T.EPI = E.SM->getExtraProcessorInfo();
    if (T.EPI.ReorderBufferSize && G.micro_op_buffer_size != Default.micro_op_buffer_size)
      T.EPI.ReorderBufferSize = G.micro_op_buffer_size;
    T.SM.ExtraProcessorInfo = &T.EPI;
  }
  if (G.on("move_elimination")) describeRenamedRegisters(E, T);
}

// The CPU's tables, plus a clone of every class: class C + NumClasses is what
// an opcode without a row of its own resolves to.
void copyTables(const EngineImpl &E, TableImpl &T) {
  const unsigned N = E.NumClasses;
  T.Classes.assign(E.SM->SchedClassTable, E.SM->SchedClassTable + N);
  T.Classes.insert(T.Classes.end(), E.SM->SchedClassTable, E.SM->SchedClassTable + N);
  T.WPR.assign(E.WPR, E.WPR + E.NumWPR);
  T.WL.assign(E.WL, E.WL + E.NumWL);
  T.RA.assign(E.RA, E.RA + E.NumRA);
}

// What a row overrides: an opcode, resolved to one concrete class.
struct RowTarget {
  unsigned Opcode = 0, Static = 0, Class = 0;
};

RowTarget lookupKey(const EngineImpl &E, const std::string &Where, const std::string &Key) {
  size_t Hash = Key.find('#');
  auto OIt = E.OpcodeByName.find(Key.substr(0, Hash));
  if (OIt == E.OpcodeByName.end()) invalid(Where, "no such opcode in LLVM " LLVM_VERSION_STRING);
  RowTarget At;
  At.Opcode = OIt->second;
  At.Static = At.Class = E.staticClass(At.Opcode);
  if (Hash != std::string::npos) {
    try {
      At.Class = std::stoul(Key.substr(Hash + 1));
    } catch (const std::exception &) {
      invalid(Where, "malformed variant suffix");
    }
  }
  if (!E.isValidClass(At.Static) || At.Class >= E.NumClasses || !E.isValidClass(At.Class))
    invalid(Where, "the " + E.Mcpu + " model has no scheduling class for it");
  if (E.SM->getSchedClassDesc(At.Class)->isVariant())
    invalid(Where, "variant opcode: name one resolution as OPCODE#CLASS");
  return At;
}

// Checks the row's values against Limits (and LLVM's field widths); returns its port uses.
PortUses validateRow(const EngineImpl &E, const std::string &Where, const Row &R) {
  checkRange(Where, "uops", R.uops, Limits::kUopsMin, Limits::kUopsMax);
  if (R.latency.size() > 64) invalid(Where, "more than 64 latency entries");
  for (size_t I = 0; I < R.latency.size(); ++I)
    checkRange(Where, "latency[" + std::to_string(I) + "]", R.latency[I], Limits::kLatencyMin,
               Limits::kLatencyMax);
  for (size_t I = 0; I < R.read_advance.size(); ++I) {
    const ReadAdvance &A = R.read_advance[I];
    for (size_t J = 0; J < I; ++J)
      if (R.read_advance[J].use == A.use && R.read_advance[J].write_id == A.write_id)
        invalid(Where, "read_advance lists use " + std::to_string(A.use) + " of write " +
                           std::to_string(A.write_id) + " twice");
    checkRange(Where, "read_advance.use", A.use, 0, 255);
    checkRange(Where, "read_advance.write", A.write_id, 0, 65535);
    checkRange(Where, "read_advance[" + std::to_string(A.use) + "]", A.cycles,
               Limits::kReadAdvanceMin, Limits::kReadAdvanceMax);
  }
  PortUses Uses;
  for (const auto &[Name, Cy] : R.ports) {
    auto RIt = E.ResourceByName.find(Name);
    if (RIt == E.ResourceByName.end())
      invalid(Where, "no processor resource '" + Name + "' in the " + E.Mcpu + " model");
    checkRange(Where, "ports." + Name, Cy, Limits::kPortCyclesMin, Limits::kPortCyclesMax);
    for (const auto &U : Uses)
      if (U.first == RIt->second) invalid(Where, "resource '" + Name + "' listed twice");
    Uses.push_back({RIt->second, Cy});
  }
  return Uses;
}

// The scheduling entries of one class.
struct ClassEntries {
  std::vector<MCWriteProcResEntry> WPR;
  std::vector<MCWriteLatencyEntry> WL;
  std::vector<MCReadAdvanceEntry> RA;
};

ClassEntries classEntries(const EngineImpl &E, const MCSchedClassDesc &Orig, const Row &R,
                          const PortUses &Uses) {
  ClassEntries X;
  X.WPR = expandUses(E, Orig, Uses);
  for (size_t I = 0; I < R.latency.size(); ++I) {
    MCWriteLatencyEntry L{};
    L.Cycles = R.latency[I];
    // ReadAdvance entries name writes by these IDs: keep them.
    L.WriteResourceID =
        I < Orig.NumWriteLatencyEntries ? E.WL[Orig.WriteLatencyIdx + I].WriteResourceID : 0;
    X.WL.push_back(L);
  }
  for (const ReadAdvance &A : R.read_advance)
    X.RA.push_back(MCReadAdvanceEntry{(unsigned)A.use, (unsigned)A.write_id, A.cycles});
  return X;
}

// Identical rows share a class: a class is keyed by everything InstrBuilder reads of it.
class ClassInterner {
  std::unordered_map<std::string, unsigned> ByContent;

 public:
  // Folded (the load cycles folded out, folded_load) keeps a folded class apart from a plain one.
  unsigned intern(TableImpl &T, const MCSchedClassDesc &Orig, int Uops, const ClassEntries &X,
                  const std::string &Where, unsigned Folded = 0) {
    std::string Content = std::to_string(Folded) + "|";
    auto put = [&](long V) { Content += std::to_string(V) + ","; };
    put(Uops), put(Orig.BeginGroup), put(Orig.EndGroup), put(Orig.RetireOOO), Content += "|";
    for (auto &W : X.WPR) put(W.ProcResourceIdx), put(wprCycles(W));
    Content += "|";
    for (auto &L : X.WL) put(L.Cycles), put(L.WriteResourceID);
    Content += "|";
    for (auto &A : X.RA) put(A.UseIdx), put(A.WriteResourceID), put(A.Cycles);

    auto [It, New] = ByContent.try_emplace(Content, (unsigned)T.Classes.size());
    if (New) {
      MCSchedClassDesc Desc = Orig;
      Desc.NumMicroOps = Uops;
      Desc.WriteProcResIdx = T.WPR.size();
      Desc.NumWriteProcResEntries = X.WPR.size();
      Desc.WriteLatencyIdx = T.WL.size();
      Desc.NumWriteLatencyEntries = X.WL.size();
      Desc.ReadAdvanceIdx = T.RA.size();
      Desc.NumReadAdvanceEntries = X.RA.size();
      T.WPR.insert(T.WPR.end(), X.WPR.begin(), X.WPR.end());
      T.WL.insert(T.WL.end(), X.WL.begin(), X.WL.end());
      T.RA.insert(T.RA.end(), X.RA.begin(), X.RA.end());
      if (T.WPR.size() > 65535 || T.WL.size() > 65535 || T.RA.size() > 65535)
        invalid(Where, "the table needs more than 65535 scheduling entries (LLVM's 16-bit "
                       "indices); pass only the rows of the blocks being simulated");
      T.Classes.push_back(Desc);
    }
    return It->second;
  }
};

void makeSubtarget(const EngineImpl &E, TableImpl &T) {
  T.SM.SchedClassTable = T.Classes.data();
  T.SM.NumSchedClasses = T.Classes.size();
  T.ProcDesc.push_back(
      SubtargetSubTypeKV{E.Mcpu.c_str(), FeatureBitArray({}), FeatureBitArray({}), &T.SM});
  T.STI = std::make_unique<OverrideSubtargetInfo>(E, T.ProcDesc, T.WPR.data(), T.WL.data(),
                                                  T.RA.data(), T.Private, T.SlowLea);
  if (T.STI->getFeatureBits() != E.STI->getFeatureBits() || &T.STI->getSchedModel() != &T.SM)
    throw std::runtime_error("internal: the overriding subtarget does not match " + E.Mcpu);
}

}  // namespace

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

Table Engine::compile(const Globals &G, const std::vector<Row> &rows) const {
  const EngineImpl &E = *impl_;
  auto T = std::make_shared<TableImpl>();
  T->Engine = impl_;
  applyGlobals(E, G, default_globals(), *T);
  copyTables(E, *T);
  const bool Fold = G.on("folded_load");
  if (Fold) foldClasses(E, *T, [&](unsigned C) { return rowFromClass(E, "", C); });
  ClassInterner Interner;
  for (const Row &R : rows) {
    const std::string Where = "opcode '" + R.key + "'";
    const RowTarget At = lookupKey(E, Where, R.key);
    const PortUses Uses = validateRow(E, Where, R);
    checkNesting(E, Where, At.Class, Uses);
    const MCSchedClassDesc &Orig = *E.SM->getSchedClassDesc(At.Class);
    if (R.latency.size() != Orig.NumWriteLatencyEntries)
      invalid(Where, "latency has " + std::to_string(R.latency.size()) + " entries; the instruction writes " +
                         std::to_string(Orig.NumWriteLatencyEntries));
    unsigned Load = 0;
    const ClassEntries X =
        classEntries(E, Orig, Fold && foldsLoad(E.MCII->get(At.Opcode)) ? foldedRow(R, Load) : R, Uses);
    if (R.uops == 0 && !X.WPR.empty())
      invalid(Where, "uops = 0 while the port map uses resources (LLVM rejects such instructions)");
    const unsigned Private = Interner.intern(*T, Orig, R.uops, X, Where, Load);
    T->Private[(uint64_t(At.Opcode) << 32) | At.Class] = Private;
    if (Load) T->Folded[Private] = Load;
    T->Classes[At.Static].NumMicroOps = MCSchedClassDesc::VariantNumMicroOps;  // route it through the hook
  }
  if (G.on("slow_lea"))
    for (const SlowForm &F : slowForms(E, *T)) {  // each LEA opcode's, handed out by the variant hook
      const MCSchedClassDesc &Orig = *E.SM->getSchedClassDesc(F.Static);
      T->SlowLea[F.Opcode] = Interner.intern(*T, Orig, F.R.uops, classEntries(E, Orig, F.R, {{F.Port, 1}}), "slow_lea");
      T->Classes[F.Static].NumMicroOps = MCSchedClassDesc::VariantNumMicroOps;
    }
  makeSubtarget(E, *T);
  return Table{T};
}

}  // namespace dt

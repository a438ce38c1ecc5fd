// The engine of one CPU: LLVM's x86 MC objects and the CPU's scheduling model.
#include "engine_impl.h"
#include "slow_lea.h"

#include "llvm/MCA/Support.h"

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

const Target *x86Target() {
  static std::once_flag Once;
  std::call_once(Once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmParser();
    LLVMInitializeX86Disassembler();
    LLVMInitializeX86TargetMCA();
  });
  std::string Err;
  const Target *T = TargetRegistry::lookupTarget(kTriple, Err);
  if (!T) throw std::runtime_error("LLVM has no x86 target: " + Err);
  return T;
}

void createMCObjects(EngineImpl &E, const std::string &mcpu) {
  E.TheTarget = x86Target();
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
}

// Locate the CPU's tables and their extents through the classes that index them.
void locateTables(EngineImpl &E) {
  E.SM = &E.STI->getSchedModel();
  E.NumClasses = E.SM->NumSchedClasses;
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
}

void indexResourcesAndOpcodes(EngineImpl &E) {
  E.ResMask.assign(E.SM->getNumProcResourceKinds(), 0);
  mca::computeProcResourceMasks(*E.SM, E.ResMask);
  for (unsigned R = 1; R < E.SM->getNumProcResourceKinds(); ++R)
    E.ResourceByName[E.SM->getProcResource(R)->Name] = R;
  for (unsigned O = 0; O < E.MCII->getNumOpcodes(); ++O) E.OpcodeByName[E.MCII->getName(O)] = O;
  for (unsigned R = 1; R < E.MRI->getNumRegs(); ++R) {
    const StringRef Name = E.MRI->getName(R);
    if (Name == "RSP") E.RSP = R;
    if (Name == "EFLAGS") E.EFLAGS = R;
    if (is_contained({"RAX", "RBX", "RCX", "RDX", "RSI", "RDI", "RBP", "RSP", "R8", "R9", "R10", "R11", "R12",
                      "R13", "R14", "R15"},
                     Name))
      E.Gpr64.push_back(R);
  }
}

}  // namespace

std::vector<std::string> knownCpus() {
  std::unique_ptr<MCSubtargetInfo> STI(x86Target()->createMCSubtargetInfo(kTriple, "", ""));
  std::vector<std::string> Names;
  for (const auto &Desc : STI->getAllProcessorDescriptions())
    if (STI->getSchedModelForCPU(Desc.Key).hasInstrSchedModel()) Names.emplace_back(Desc.Key);
  return Names;
}

Engine::Engine(const std::string &mcpu, Generation generation) : impl_(std::make_shared<EngineImpl>()) {
  impl_->Mcpu = mcpu;
  createMCObjects(*impl_, mcpu);
  locateTables(*impl_);
  indexResourcesAndOpcodes(*impl_);
  impl_->Gen = std::move(generation);
}

Engine::~Engine() = default;
const std::string &Engine::mcpu() const { return impl_->Mcpu; }

std::vector<int> Engine::sched_classes(const std::vector<std::string> &keys) const {
  std::vector<int> Out;
  for (const std::string &K : keys) {
    const size_t Hash = K.find('#');
    auto It = impl_->OpcodeByName.find(K.substr(0, Hash));
    if (It == impl_->OpcodeByName.end())
      Out.push_back(-1);
    else
      Out.push_back(Hash == std::string::npos ? (int)impl_->staticClass(It->second) : std::atoi(K.c_str() + Hash + 1));
  }
  return Out;
}

Globals Engine::default_globals() const {
  return Globals{(int)impl_->SM->IssueWidth, (int)impl_->SM->MicroOpBufferSize};
}

std::vector<Resource> Engine::resources() const {
  const MCSchedModel &SM = *impl_->SM;
  std::vector<Resource> Out;
  for (unsigned R = 1; R < SM.getNumProcResourceKinds(); ++R) {
    const MCProcResourceDesc &D = *SM.getProcResource(R);
    Resource X{D.Name, (int)D.NumUnits, D.SubUnitsIdxBegin != nullptr, {}, R == slowLeaPort(*impl_)};
    if (X.is_group)
      for (unsigned U = 0; U < D.NumUnits; ++U)
        X.members.push_back(SM.getProcResource(D.SubUnitsIdxBegin[U])->Name);
    Out.push_back(std::move(X));
  }
  return Out;
}

}  // namespace dt

// The extended model's slow LEA (mechanism slow_lea, Intel Sandy Bridge to
// Skylake): an LEA of three components (base, index and displacement), or of a
// base of RBP or R13 with an index, takes the slow path: 3 cycles, on port 1
// only (Intel's optimization manual, 248966, "Using LEA"). LLVM's tables give
// every LEA one cycle on two ports: BHive measures the chain `leaq
// 8(%rbp,%rsi,8), %rbp` at 3.0 cycles an iteration on Skylake and `leaq
// 1(%rbx,%r14), %rdi` alone at 1.0 (one port). The slow form is a class of its
// own per LEA opcode (tables.cpp), which the variant hook hands out to each slow
// instruction (override_subtarget.h).
#pragma once

#include "engine_impl.h"

namespace dt {

// The LEA opcodes (LLVM's names).
inline constexpr const char *kLeaOpcodes[] = {"LEA16r", "LEA32r", "LEA64_32r", "LEA64r"};

// Whether MI is an LEA that takes the slow path.
bool slowLea(const EngineImpl &E, const llvm::MCInst &MI);

// The processor resource a slow LEA runs on: the one whose name ends as the
// generation's slow_lea_port says (SKLPort1); 0 where none does.
unsigned slowLeaPort(const EngineImpl &E);

// The slow form of an LEA opcode under a table: the µops its row gives (or
// LLVM's), slow_lea_latency cycles, one cycle of Port (slowLeaPort).
struct SlowForm {
  unsigned Opcode = 0, Static = 0;  // the opcode and its static class
  Row R;
  unsigned Port = 0;
};
std::vector<SlowForm> slowForms(const EngineImpl &E, const TableImpl &T);

}  // namespace dt

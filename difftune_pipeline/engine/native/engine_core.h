// The parametric MCA engine: LLVM's MCA library run in-process over scheduling
// tables that are owned copies of the CPU's, so that DiffTune's per-opcode
// parameters can be overridden without modifying LLVM.
//
// This header is LLVM-free so that the Python bindings (built with RTTI) never
// see LLVM's (RTTI-less) polymorphic types.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace dt {

struct ReadAdvance {
  int use = 0;       // operand use index
  int write_id = 0;  // WriteResourceID it applies to (0: any)
  int cycles = 0;
};

// One parameter row: the DiffTune parameters of one opcode (or of one
// resolution of a variant opcode, keyed "OPCODE#CLASS").
struct Row {
  std::string key;
  std::vector<int> latency;  // per def (write latency entries)
  int uops = 0;
  std::vector<ReadAdvance> read_advance;
  // Explicit cycles per processor resource (the expanded form LLVM stores is
  // derived from these): a group's own cycles exclude those of its members.
  std::vector<std::pair<std::string, int>> ports;
};

// A mechanism of the extended model as the engine's CPU generation has it:
// the mechanisms it needs on, and its parameters with their valid ranges
// (declared once, in difftune_pipeline/engine/mechanisms.py).
struct MechanismSpec {
  std::string name;
  std::vector<std::string> requires_on;
  std::vector<std::tuple<std::string, int, int>> parameters;  // (name, min, max)
};

// The facts of a CPU generation the engine's mechanisms read (from
// difftune_pipeline/engine/generations.py): none for a CPU without one, whose
// tables run llvm-mca's own pipeline only.
struct Generation {
  std::string name;
  std::vector<MechanismSpec> mechanisms;
  bool unlaminates_indexed = false;      // micro-fusion never keeps an indexed memory operand fused
  bool fusible_on_last_decoder = false;  // a macro-fusible instruction may take the last decoder
  std::string slow_lea_port;             // how the name of the port a slow LEA runs on ends (slow_lea)
  std::vector<std::string> reads_destination;  // opcodes whose register forms read their destination (output_dependency)
  std::vector<std::string> reads_flags;        // opcodes whose register forms read the flags (output_dependency)
  std::vector<std::string> complex_decoder;    // opcodes whose register forms only the first decoder takes (complex_decoder)
  const MechanismSpec *find(const std::string &Mechanism) const {
    for (const MechanismSpec &M : mechanisms)
      if (M.name == Mechanism) return &M;
    return nullptr;
  }
};

struct Globals {
  int dispatch_width = 0;
  int micro_op_buffer_size = 0;
  // The extended model's mechanisms that are on (none: llvm-mca's own
  // pipeline), and their parameters.
  std::vector<std::string> mechanisms;
  std::map<std::string, int> parameters;
  bool on(const std::string &Mechanism) const {
    return std::find(mechanisms.begin(), mechanisms.end(), Mechanism) != mechanisms.end();
  }
  bool any() const { return !mechanisms.empty(); }
  // A parameter of a mechanism that is on (compile() checked it is there).
  int param(const std::string &Name) const { return parameters.at(Name); }
};

// One memory access of one instruction in one iteration of a block (what a
// harness model recorded, or a symbolic stand-in).
struct Access {
  int iteration = 0;
  int instr = 0;
  uint64_t address = 0;
  int size = 0;
  bool store = false;
};

struct Resource {
  std::string name;
  int num_units = 0;
  bool is_group = false;
  std::vector<std::string> members;  // units of a group
  bool slow_lea = false;              // the port a slow LEA runs on (slow_lea)
};

// A table compiled into LLVM scheduling tables; immutable, shareable across threads.
struct TableImpl;
struct Table {
  std::shared_ptr<const TableImpl> impl;
};

// What an instruction reads and writes, from LLVM's instruction descriptions:
// the input of dependency analysis (block features, the structured surrogate).
struct InstrOperands {
  std::vector<std::string> reads, writes;  // registers, widened to their largest super-register
  bool may_load = false, may_store = false;
  bool dependency_breaking = false;  // zero idiom / dependency-breaking: its register reads are dropped
  bool stack_op = false;  // push/pop: under the stack engine they neither read nor write RSP
  std::vector<std::string> merges;   // what a partial write waits for under partial_register (widened)
  std::string address;               // the memory operand (base,scale,index,disp,segment); "" if none
  bool pointer_chase = false;        // loads through a pointer a plain load gave (pointer_chasing's rule)
  bool slow_lea = false;             // an LEA that takes the slow path (slow_lea's rule)
};

struct BlockImpl;
struct Block {
  std::shared_ptr<const BlockImpl> impl;
  bool ok() const;
  const std::string &error() const;
  size_t size() const;
  std::vector<std::string> opcodes() const;
  std::vector<std::string> asm_lines() const;
  // Parameter-row key of each instruction (opcode, or OPCODE#CLASS when variant).
  std::vector<std::string> row_keys() const;
  std::vector<InstrOperands> operands() const;
  // ("hex", bytes) or ("asm", text): enough for another engine to rebuild the block.
  std::pair<std::string, std::string> source() const;
  // Each instruction's machine code, as hex (assembly text is encoded).
  std::vector<std::string> encoding() const;
  // The same block with the addresses its loads and stores touch (the extended
  // model's memory dependencies); an empty list removes them. `exact`: real
  // addresses (4K aliasing is checked), not symbolic stand-ins.
  // `one_page`: the harness backs every page with one physical page (physical_alias).
  Block with_accesses(const std::vector<Access> &accesses, bool exact, bool one_page) const;
  bool exact_accesses() const;
  bool one_page_accesses() const;  // the addresses are a harness's that backs every page with one physical page
  std::vector<Access> accesses() const;
  // Per instruction: (bytes, µops micro-fusion saves, macro-fused into the one before).
  std::vector<std::tuple<int, int, bool>> front_end() const;
  // Per instruction: whether it waits for Zen+'s zero-count-shift assist (with
  // CL known to be zero when exact accesses are attached), whether it is locked,
  // and whether it faults on the x87 stack once the stack has settled.
  std::vector<std::tuple<bool, bool, bool>> serialising() const;
};

struct SimResult {
  std::vector<int64_t> cycles;      // -1 where status is not "ok"
  std::vector<double> steady;       // cycles per 100 iterations in steady state; NaN where not "ok"
  std::vector<std::string> status;  // "ok" or a reason
};

// Cycles first..last in which an instruction waited for one cause.
struct Wait {
  int first = 0, last = 0;
  std::string cause;
};

// One instruction of one iteration as MCA's events saw it: the cycles of
// llvm-mca's timeline view (-1: not reached), and why it waited in each cycle
// it did (before dispatch: a dispatch stall; after: register, memory, resource),
// as runs of cycles, so that a long wait costs one entry.
struct TraceEntry {
  int dispatched = -1, ready = -1, issued = -1, executed = -1, retired = -1;
  std::vector<Wait> waits;
};

// One block simulated under one table, with its events recorded.
struct Trace {
  int64_t cycles = -1;
  double steady = 0;                        // cycles per 100 iterations in steady state, as simulate()
  std::string status;                       // "ok" or a reason, as simulate()
  std::vector<std::string> units;           // resource units, llvm-mca's pressure columns
  std::vector<TraceEntry> timeline;         // the first `shown` iterations, in program order
  std::vector<std::vector<double>> pressure;  // [instruction, last: the block][unit] per iteration
  // Cycles in which back-end pressure rose, and why (llvm-mca's bottleneck analysis).
  int64_t pressure_cycles = 0, resource_pressure_cycles = 0, register_pressure_cycles = 0,
          memory_pressure_cycles = 0;
  int64_t dispatch_stalls = 0;  // stall events of the dispatch stage (llvm-mca reports pressure only if any)
};

class InvalidTable : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct EngineImpl;
class Engine {
 public:
  // `generation`: the facts of the CPU's generation (an empty one: llvm-mca only).
  Engine(const std::string &mcpu, Generation generation);
  ~Engine();
  const std::string &mcpu() const;

  Block disassemble(const std::string &hex) const;
  Block parse_asm(const std::string &text) const;

  Globals default_globals() const;
  std::vector<Resource> resources() const;
  // Every opcode the model schedules; plus, for variant opcodes, one row per
  // resolution that occurs in `blocks`.
  std::vector<Row> default_rows(const std::vector<Block> &blocks) const;
  // LLVM's scheduling class of each row key (a variant's resolved class), -1 for
  // a key that names no opcode: rows of one class are scheduled alike by LLVM.
  std::vector<int> sched_classes(const std::vector<std::string> &keys) const;
  // Throws InvalidTable naming the row and the parameter.
  Table compile(const Globals &globals, const std::vector<Row> &rows) const;
  // Repairs a port map for compile(): walking the resources with cycles > 0
  // from most cycles to fewest (ties in input order), drops each one that
  // partially overlaps one already kept, unless both are in `allowed`. Returns
  // `ports` in input order with every resource not kept at 0 cycles. Throws
  // InvalidTable on an unknown resource.
  std::vector<std::pair<std::string, int>> nested_ports(
      const std::vector<std::pair<std::string, int>> &ports,
      const std::vector<std::string> &allowed) const;

  // Simulate pairs (blocks[block_idx[i]], tables[table_idx[i]]) on `threads` threads.
  // fast_forward: stop once the cycles per iteration repeat and extrapolate.
  SimResult simulate(const std::vector<Block> &blocks, const std::vector<Table> &tables,
                     const std::vector<int64_t> &block_idx, const std::vector<int64_t> &table_idx,
                     unsigned iterations, unsigned threads, uint64_t cycle_cap,
                     bool fast_forward) const;
  // One block under one table with every event recorded (no fast-forward).
  Trace trace(const Block &block, const Table &table, unsigned iterations, unsigned shown,
              uint64_t cycle_cap) const;

 private:
  std::shared_ptr<EngineImpl> impl_;
};

// Valid parameter ranges (documented in the README; enforced by compile(),
// exported to Python as _engine.LIMITS).
struct Limits {
  static constexpr int kLatencyMin = 0, kLatencyMax = 1000;
  static constexpr int kUopsMin = 0, kUopsMax = 1000;
  static constexpr int kPortCyclesMin = 0, kPortCyclesMax = 1000;
  static constexpr int kReadAdvanceMin = -1000, kReadAdvanceMax = 1000;
  static constexpr int kDispatchWidthMin = 1, kDispatchWidthMax = 1000;
  static constexpr int kMicroOpBufferMin = 2, kMicroOpBufferMax = 100000;
};

// The x86 CPUs whose LLVM model has per-instruction scheduling data (the ones an Engine accepts).
std::vector<std::string> knownCpus();

// The register-to-register move opcodes that move elimination may rename away.
std::vector<std::string> eliminableMoves();

}  // namespace dt

// Python bindings of the engine (nanobind). Parameter rows cross as plain dicts
// so that the Python side can keep tables in polars and JSON.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "engine_core.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::dict rowToDict(const dt::Row &R) {
  nb::dict D, Ports;
  nb::list RA;
  for (const auto &A : R.read_advance) RA.append(nb::make_tuple(A.use, A.write_id, A.cycles));
  for (const auto &[Name, Cy] : R.ports) Ports[Name.c_str()] = Cy;
  D["key"] = R.key;
  D["latency"] = R.latency;
  D["uops"] = R.uops;
  D["read_advance"] = RA;
  D["ports"] = Ports;
  return D;
}

dt::Row rowFromDict(nb::handle H) {
  nb::dict D = nb::cast<nb::dict>(H);
  dt::Row R;
  R.key = nb::cast<std::string>(D["key"]);
  R.latency = nb::cast<std::vector<int>>(D["latency"]);
  R.uops = nb::cast<int>(D["uops"]);
  for (nb::handle A : D["read_advance"]) {
    auto T = nb::cast<std::vector<int>>(A);
    if (T.size() != 3)
      throw dt::InvalidTable("opcode '" + R.key + "': read_advance entries are (use, write, cycles)");
    R.read_advance.push_back({T[0], T[1], T[2]});
  }
  for (auto [K, V] : nb::cast<nb::dict>(D["ports"]))
    R.ports.push_back({nb::cast<std::string>(K), nb::cast<int>(V)});
  return R;
}

// The base globals are required; a key whose value is a bool is a mechanism of
// the extended model (on when true), any other an int parameter of one.
dt::Globals globalsFromDict(nb::dict G) {
  dt::Globals Gl;
  for (const char *K : {"dispatch_width", "micro_op_buffer_size"})
    if (!G.contains(K)) throw dt::InvalidTable(std::string("globals: ") + K + " is missing");
  for (auto [K, V] : G) {
    const std::string Name = nb::cast<std::string>(K);
    if (Name == "dispatch_width")
      Gl.dispatch_width = nb::cast<int>(V);
    else if (Name == "micro_op_buffer_size")
      Gl.micro_op_buffer_size = nb::cast<int>(V);
    else if (nb::isinstance<nb::bool_>(V)) {
      if (nb::cast<bool>(V)) Gl.mechanisms.push_back(Name);
    } else
      Gl.parameters[Name] = nb::cast<int>(V);
  }
  return Gl;
}

// A CPU generation's facts, as difftune_pipeline.engine.generations gives them.
dt::Generation generationFromDict(nb::dict D) {
  dt::Generation G;
  if (D.contains("name")) G.name = nb::cast<std::string>(D["name"]);
  if (D.contains("unlaminates_indexed")) G.unlaminates_indexed = nb::cast<bool>(D["unlaminates_indexed"]);
  if (D.contains("fusible_on_last_decoder"))
    G.fusible_on_last_decoder = nb::cast<bool>(D["fusible_on_last_decoder"]);
  if (D.contains("slow_lea_port")) G.slow_lea_port = nb::cast<std::string>(D["slow_lea_port"]);
  if (D.contains("reads_destination"))
    G.reads_destination = nb::cast<std::vector<std::string>>(D["reads_destination"]);
  if (D.contains("reads_flags")) G.reads_flags = nb::cast<std::vector<std::string>>(D["reads_flags"]);
  if (D.contains("complex_decoder"))
    G.complex_decoder = nb::cast<std::vector<std::string>>(D["complex_decoder"]);
  if (D.contains("mechanisms"))
    for (nb::handle H : D["mechanisms"]) {
      nb::dict M = nb::cast<nb::dict>(H);
      dt::MechanismSpec Spec;
      Spec.name = nb::cast<std::string>(M["name"]);
      Spec.requires_on = nb::cast<std::vector<std::string>>(M["requires"]);
      Spec.parameters = nb::cast<std::vector<std::tuple<std::string, int, int>>>(M["parameters"]);
      G.mechanisms.push_back(std::move(Spec));
    }
  return G;
}

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "LLVM MCA, in-process, with overridable per-opcode scheduling parameters";
  m.attr("LLVM_VERSION") = DT_LLVM_VERSION;
  m.attr("LLVM_BIN_DIR") = DT_LLVM_BIN_DIR;
  nb::exception<dt::InvalidTable>(m, "InvalidTable", PyExc_ValueError);
  using L = dt::Limits;
  nb::dict Limits;
  Limits["latency"] = nb::make_tuple(L::kLatencyMin, L::kLatencyMax);
  Limits["uops"] = nb::make_tuple(L::kUopsMin, L::kUopsMax);
  Limits["port_cycles"] = nb::make_tuple(L::kPortCyclesMin, L::kPortCyclesMax);
  Limits["read_advance"] = nb::make_tuple(L::kReadAdvanceMin, L::kReadAdvanceMax);
  Limits["dispatch_width"] = nb::make_tuple(L::kDispatchWidthMin, L::kDispatchWidthMax);
  Limits["micro_op_buffer_size"] = nb::make_tuple(L::kMicroOpBufferMin, L::kMicroOpBufferMax);
  m.attr("LIMITS") = Limits;
  m.def("known_cpus", &dt::knownCpus, "x86 CPUs whose LLVM model has per-instruction scheduling data");
  m.def("eliminable_moves", &dt::eliminableMoves, "the move opcodes that move elimination may rename away");

  nb::class_<dt::Block>(m, "Block")
      .def_prop_ro("ok", &dt::Block::ok)
      .def_prop_ro("error", &dt::Block::error)
      .def_prop_ro("opcodes", &dt::Block::opcodes)
      .def_prop_ro("asm", &dt::Block::asm_lines)
      .def_prop_ro("row_keys", &dt::Block::row_keys)
      .def_prop_ro("source", &dt::Block::source)
      .def_prop_ro("encoding", &dt::Block::encoding)
      .def(
          "with_accesses",
          [](const dt::Block &B, const std::vector<std::tuple<int, int, uint64_t, int, bool>> &A,
             bool Exact, bool OnePage) {
            std::vector<dt::Access> Out;
            for (const auto &[It, In, Addr, Size, Store] : A) Out.push_back({It, In, Addr, Size, Store});
            return B.with_accesses(Out, Exact, OnePage);
          },
          "accesses"_a, "exact"_a, "one_page"_a)
      .def_prop_ro("exact_accesses", &dt::Block::exact_accesses)
      .def_prop_ro("one_page_accesses", &dt::Block::one_page_accesses)
      .def_prop_ro("front_end", &dt::Block::front_end)
      .def_prop_ro("serialising", &dt::Block::serialising)
      .def_prop_ro("accesses",
                   [](const dt::Block &B) {
                     std::vector<std::tuple<int, int, uint64_t, int, bool>> Out;
                     for (const auto &A : B.accesses())
                       Out.emplace_back(A.iteration, A.instr, A.address, A.size, A.store);
                     return Out;
                   })
      .def_prop_ro("operands", [](const dt::Block &B) {
        nb::list L;
        for (const auto &O : B.operands()) {
          nb::dict D;
          D["reads"] = nb::cast(O.reads);
          D["writes"] = nb::cast(O.writes);
          D["may_load"] = O.may_load;
          D["may_store"] = O.may_store;
          D["dependency_breaking"] = O.dependency_breaking;
          D["stack_op"] = O.stack_op;
          D["merges"] = nb::cast(O.merges);
          D["address"] = O.address;
          D["pointer_chase"] = O.pointer_chase;
          D["slow_lea"] = O.slow_lea;
          L.append(D);
        }
        return L;
      })
      .def("__len__", &dt::Block::size);

  nb::class_<dt::Table>(m, "CompiledTable");

  nb::class_<dt::Engine>(m, "Engine")
      .def(
          "__init__",
          [](dt::Engine *Self, const std::string &Mcpu, nb::dict Generation) {
            new (Self) dt::Engine(Mcpu, generationFromDict(Generation));
          },
          "mcpu"_a, "generation"_a = nb::dict())
      .def_prop_ro("mcpu", &dt::Engine::mcpu)
      .def("disassemble", &dt::Engine::disassemble, "hex"_a)
      .def(
          "disassemble_many",
          [](const dt::Engine &E, const std::vector<std::string> &Hexes) {
            std::vector<dt::Block> Out;
            Out.reserve(Hexes.size());
            for (const auto &H : Hexes) Out.push_back(E.disassemble(H));
            return Out;
          },
          "hexes"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("parse_asm", &dt::Engine::parse_asm, "text"_a)
      .def("default_globals",
           [](const dt::Engine &E) {
             dt::Globals G = E.default_globals();
             nb::dict D;
             D["dispatch_width"] = G.dispatch_width;
             D["micro_op_buffer_size"] = G.micro_op_buffer_size;
             return D;
           })
      .def("resources",
           [](const dt::Engine &E) {
             nb::list L;
             for (const auto &R : E.resources()) {
               nb::dict D;
               D["name"] = R.name;
               D["num_units"] = R.num_units;
               D["is_group"] = R.is_group;
               D["members"] = R.members;
               D["slow_lea"] = R.slow_lea;
               L.append(D);
             }
             return L;
           })
      .def(
          "default_rows",
          [](const dt::Engine &E, const std::vector<dt::Block> &Blocks) {
            nb::list L;
            for (const auto &R : E.default_rows(Blocks)) L.append(rowToDict(R));
            return L;
          },
          "blocks"_a = std::vector<dt::Block>())
      .def(
          "compile",
          [](const dt::Engine &E, nb::dict G, nb::iterable Rows) {
            dt::Globals Gl = globalsFromDict(G);
            std::vector<dt::Row> Rs;
            for (nb::handle H : Rows) Rs.push_back(rowFromDict(H));
            nb::gil_scoped_release Release;
            return E.compile(Gl, Rs);
          },
          "globals"_a, "rows"_a)
      .def("nested_ports", &dt::Engine::nested_ports, "ports"_a, "allowed"_a)
      .def("sched_classes", &dt::Engine::sched_classes, "keys"_a)
      .def(
          "simulate",
          [](const dt::Engine &E, const std::vector<dt::Block> &Blocks,
             const std::vector<dt::Table> &Tables, const std::vector<int64_t> &BlockIdx,
             const std::vector<int64_t> &TableIdx, unsigned Iterations, unsigned Threads,
             uint64_t CycleCap, bool FastForward) {
            dt::SimResult R;
            {
              nb::gil_scoped_release Release;
              R = E.simulate(Blocks, Tables, BlockIdx, TableIdx, Iterations, Threads, CycleCap,
                             FastForward);
            }
            return nb::make_tuple(R.cycles, R.steady, R.status);
          },
          "blocks"_a, "tables"_a, "block_idx"_a, "table_idx"_a, "iterations"_a = 100,
          "threads"_a = 1, "cycle_cap"_a = 10000000, "fast_forward"_a = false)
      .def(
          "trace",
          [](const dt::Engine &E, const dt::Block &B, const dt::Table &T, unsigned Iterations,
             unsigned Shown, uint64_t CycleCap) {
            dt::Trace R;
            {
              nb::gil_scoped_release Release;
              R = E.trace(B, T, Iterations, Shown, CycleCap);
            }
            nb::list Timeline;
            for (const auto &En : R.timeline) {
              nb::list Waits;
              for (const auto &W : En.waits) Waits.append(nb::make_tuple(W.first, W.last, W.cause));
              Timeline.append(nb::make_tuple(En.dispatched, En.ready, En.issued, En.executed,
                                             En.retired, Waits));
            }
            nb::dict D;
            D["cycles"] = R.cycles;
            D["steady"] = R.steady;
            D["status"] = R.status;
            D["units"] = R.units;
            D["timeline"] = Timeline;
            D["pressure"] = R.pressure;
            D["pressure_cycles"] = R.pressure_cycles;
            D["resource_pressure_cycles"] = R.resource_pressure_cycles;
            D["register_pressure_cycles"] = R.register_pressure_cycles;
            D["memory_pressure_cycles"] = R.memory_pressure_cycles;
            D["dispatch_stalls"] = R.dispatch_stalls;
            return D;
          },
          "block"_a, "table"_a, "iterations"_a, "shown"_a, "cycle_cap"_a);
}

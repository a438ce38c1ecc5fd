"""The parametric llvm-mca engine: LLVM's MCA library in-process (C++ extension).

One ``Engine`` is bound to one ``-mcpu``. It disassembles blocks, exports the
CPU's default parameter table, and simulates blocks under any table, in C++
threads with the GIL released. Results equal the ``llvm-mca`` binary of the same
LLVM ("Total Cycles") under the default table.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from difftune_pipeline.engine import _engine, generations
from difftune_pipeline.engine.sim_result import MEASURES, SimResult, check_measure
from difftune_pipeline.engine.table import ParamTable, canonical_row
from difftune_pipeline.engine.table_document import LIMITS
from difftune_pipeline.engine.trace import Trace

LLVM_VERSION: str = _engine.LLVM_VERSION
T = TypeVar("T")
LLVM_MCA = Path(_engine.LLVM_BIN_DIR) / "llvm-mca"
# The -mcpu names an Engine accepts: x86 CPUs whose LLVM model schedules per instruction.
CPUS: frozenset[str] = frozenset(_engine.known_cpus())
InvalidTable = _engine.InvalidTable
Block = _engine.Block
DEFAULT_ITERATIONS = 100
DEFAULT_CYCLE_CAP = 10_000_000
DEFAULT_SHOWN = 10  # iterations a trace records instruction by instruction (llvm-mca's timeline default)
MAX_SHOWN = 1000
MAX_TRACE_ITERATIONS = 100_000  # a trace never fast-forwards: every iteration is simulated
PER_CALL = 4096  # pairs of one table simulated in one call by simulate_chunks
COMPILED_CACHE = 64  # compiled tables kept (each holds copies of the CPU's scheduling tables)

__all__ = [
    "CPUS",
    "LIMITS",
    "LLVM_MCA",
    "LLVM_VERSION",
    "Block",
    "Engine",
    "InvalidTable",
    "ParamTable",
    "MEASURES",
    "SimResult",
    "Trace",
    "check_measure",
    "default_threads",
]


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _renumber(table_idx: np.ndarray, dropped: dict) -> np.ndarray:
    """Table indices once the tables in ``dropped`` are left out of the list."""
    gone = np.array(sorted(dropped), dtype=np.int64)
    return table_idx - np.searchsorted(gone, table_idx)


class Engine:
    """LLVM MCA for one CPU, with overridable DiffTune parameters."""

    def __init__(self, mcpu: str):
        if mcpu not in CPUS:
            raise ValueError(f"unknown CPU {mcpu!r}: LLVM {LLVM_VERSION} models {', '.join(sorted(CPUS))}")
        self._native = _engine.Engine(mcpu, generations.facts(mcpu))
        self.mcpu = mcpu
        self.llvm_version = LLVM_VERSION
        self._defaults: ParamTable | None = None
        self._compiled: OrderedDict[str, _engine.CompiledTable] = OrderedDict()  # LRU: a search compiles thousands

    @property
    def parallelism(self) -> int:
        """How many simulations run at once: the threads of this process."""
        return default_threads()

    # ---- blocks -----------------------------------------------------------
    def disassemble(self, hex_: str) -> Block:
        return self._native.disassemble(hex_.strip().lower())

    def disassemble_many(self, hexes: list[str]) -> list[Block]:
        return self._native.disassemble_many([h.strip().lower() for h in hexes])

    def rebuild(self, source: tuple[str, str]) -> Block:
        """A block from another engine's ``Block.source`` (``("hex", ...)`` or ``("asm", ...)``):
        how blocks travel to other processes, where a native block cannot go."""
        kind, text = source
        if kind == "hex":
            return self.disassemble(text)
        if kind == "asm":
            return self.parse_asm(text)
        raise ValueError(f"unknown block source kind {kind!r}: hex or asm")

    def parse_asm(self, text: str) -> Block:
        """AT&T assembly text as a block. NUL bytes are refused: LLVM's lexer recurses
        on each one and a long run of them overflows the stack."""
        if "\x00" in text:
            raise ValueError("assembly text contains NUL bytes")
        return self._native.parse_asm(text)

    # ---- tables -----------------------------------------------------------
    def resources(self) -> list[dict]:
        return self._native.resources()

    def nested_ports(self, ports: list[tuple[str, int]], allowed: list[str]) -> list[tuple[str, int]]:
        """``ports`` with the cycles of a resource set to 0 where it partially overlaps
        a resource with more cycles (the rule compile() enforces: MCA can crash on
        such rows), unless both are in ``allowed`` (LLVM's own row pairs them)."""
        return self._native.nested_ports(list(ports), list(allowed))

    def sched_classes(self, keys: list[str]) -> list[int]:
        """LLVM's scheduling class of each row key (-1: no such opcode)."""
        return self._native.sched_classes(list(keys))

    def default_table(self, blocks: list[Block] = ()) -> ParamTable:
        """The CPU's table: every opcode, plus the variant resolutions in ``blocks``."""
        rows = {r.pop("key"): canonical_row(r) for r in self._native.default_rows(list(blocks))}
        return ParamTable(self.mcpu, self.llvm_version, dict(self._native.default_globals()), rows)

    def _base(self) -> ParamTable:
        if self._defaults is None:
            self._defaults = self.default_table()
        return self._defaults

    def compile(self, table: ParamTable | None) -> _engine.CompiledTable:
        """Check ``table`` against the valid ranges and build its LLVM tables (cached)."""
        if table is None:  # LLVM's own table
            key, changed, table = "", {}, self._base()
        else:
            if table.mcpu != self.mcpu:
                raise InvalidTable(f"table is for -mcpu={table.mcpu}, engine is {self.mcpu}")
            if table.llvm_version.split(".")[0] != self.llvm_version.split(".")[0]:
                raise InvalidTable(f"table is for LLVM {table.llvm_version}, engine runs LLVM {self.llvm_version}")
            # Keyed by what is compiled (globals and the rows that differ from LLVM's):
            # far cheaper than the table's fingerprint, which serialises every row.
            changed = table.changed_rows(self._base())
            key = json.dumps([table.globals, table.mechanisms, changed], sort_keys=True)
        if key in self._compiled:
            self._compiled.move_to_end(key)
        else:
            rows = [{"key": k, **r} for k, r in changed.items()]
            if problem := table.model_mismatch():
                raise InvalidTable(problem)
            globals_ = {g: table.globals[g] for g in table.global_names()} | dict.fromkeys(table.mechanisms, True)
            self._compiled[key] = self._native.compile(globals_, rows)
            if len(self._compiled) > COMPILED_CACHE:
                self._compiled.popitem(last=False)
        return self._compiled[key]

    # ---- simulation -------------------------------------------------------
    def simulate(
        self,
        blocks: list[Block],
        table: ParamTable | None = None,
        *,
        iterations: int = DEFAULT_ITERATIONS,
        threads: int | None = None,
        cycle_cap: int = DEFAULT_CYCLE_CAP,
        fast_forward: bool = False,
    ) -> SimResult:
        """Every block under one table."""
        n = len(blocks)
        return self.simulate_pairs(
            blocks,
            [table],
            np.arange(n),
            np.zeros(n, dtype=np.int64),
            iterations=iterations,
            threads=threads,
            cycle_cap=cycle_cap,
            fast_forward=fast_forward,
        )

    def simulate_pairs(
        self,
        blocks: list[Block],
        tables: list[ParamTable | None],
        block_idx,
        table_idx,
        *,
        iterations: int = DEFAULT_ITERATIONS,
        threads: int | None = None,
        cycle_cap: int = DEFAULT_CYCLE_CAP,
        fast_forward: bool = False,
    ) -> SimResult:
        """Pairs (blocks[block_idx[i]], tables[table_idx[i]]). An invalid table
        fails only its own pairs, with the validation message as their status.

        ``fast_forward`` (opt-in) stops a simulation once the cycles between
        iterations repeat and extrapolates the rest (bench/engine_fast_forward.py
        measures its speed-up and exactness)."""
        block_idx = np.asarray(block_idx, dtype=np.int64)
        table_idx = np.asarray(table_idx, dtype=np.int64)
        return self._pairs(blocks, tables, block_idx, table_idx, iterations, threads, cycle_cap, fast_forward)

    def _pairs(self, blocks, tables, block_idx, table_idx, iterations, threads, cycle_cap, fast_forward) -> SimResult:
        """``simulate_pairs`` here, on this process's threads (``RayEngine``: on its workers)."""
        compiled, errors = [], {}
        for i, t in enumerate(tables):
            try:
                compiled.append(self.compile(t))
            except InvalidTable as exc:
                errors[i] = f"invalid table: {exc}"
                compiled.append(None)
        cycles = np.full(len(block_idx), -1, dtype=np.int64)
        steady = np.full(len(block_idx), np.nan)
        status = [errors.get(t, "") for t in table_idx.tolist()]
        run = np.array([t not in errors for t in table_idx.tolist()], dtype=bool)
        if run.any():  # pairs of invalid tables are not simulated
            got, got_steady, got_status = self._native.simulate(
                list(blocks),
                [c for c in compiled if c is not None],
                block_idx[run].tolist(),
                _renumber(table_idx[run], errors).tolist(),
                iterations,
                threads or default_threads(),
                cycle_cap,
                fast_forward,
            )
            cycles[run] = got
            steady[run] = got_steady
            for i, st in zip(np.nonzero(run)[0].tolist(), got_status):
                status[i] = st
        return SimResult(cycles, list(status), steady)

    def simulate_chunks(
        self,
        blocks: list[Block],
        chunks: Iterable[tuple[ParamTable | None, Sequence[int], object]],
        write: Callable[[object, SimResult], T],
        *,
        iterations: int = DEFAULT_ITERATIONS,
        cycle_cap: int = DEFAULT_CYCLE_CAP,
        fast_forward: bool = False,
    ) -> Iterator[T]:
        """Chunks ``(table, block_idx, payload)``: blocks ``blocks[block_idx]`` under
        one table, each handed with its result to ``write(payload, result)``
        in the process that simulated it; yields what ``write`` returns, as chunks
        finish."""
        return self._chunks(blocks, chunks, write, iterations, cycle_cap, fast_forward)

    def _chunks(self, blocks, chunks, write, iterations, cycle_cap, fast_forward) -> Iterator:
        """``simulate_chunks`` here: in this process, consecutive chunks of one table
        together (up to ``PER_CALL`` pairs) in one call on every thread (``RayEngine``:
        each chunk a task of a worker)."""
        group: list = []
        pairs = 0
        for chunk in chunks:
            if group and (chunk[0] is not group[0][0] or pairs + len(chunk[1]) > PER_CALL):
                yield from self._simulate_group(blocks, group, write, iterations, cycle_cap, fast_forward)
                group, pairs = [], 0
            group.append(chunk)
            pairs += len(chunk[1])
        if group:
            yield from self._simulate_group(blocks, group, write, iterations, cycle_cap, fast_forward)

    def _simulate_group(self, blocks, group, write, iterations, cycle_cap, fast_forward) -> Iterator:
        block_idx = np.concatenate([np.asarray(c[1], dtype=np.int64) for c in group])
        result = self.simulate_pairs(
            blocks,
            [group[0][0]],
            block_idx,
            np.zeros(len(block_idx), dtype=np.int64),
            iterations=iterations,
            cycle_cap=cycle_cap,
            fast_forward=fast_forward,
        )
        start = 0
        for _, idx, payload in group:
            end = start + len(idx)
            yield write(payload, result[start:end])
            start = end

    def trace(
        self,
        block: Block,
        table: ParamTable | None = None,
        *,
        iterations: int = DEFAULT_ITERATIONS,
        shown: int = DEFAULT_SHOWN,
        cycle_cap: int = DEFAULT_CYCLE_CAP,
    ) -> Trace:
        """One block under one table with its events recorded: the timeline of the
        first ``shown`` iterations, resource pressure and back-end pressure over
        all ``iterations``. The cycles equal ``simulate``'s (no fast-forward)."""
        if not (1 <= iterations <= MAX_TRACE_ITERATIONS and 0 <= shown <= MAX_SHOWN and 1 <= cycle_cap < 2**31):
            raise ValueError(
                f"a trace needs 1 <= iterations <= {MAX_TRACE_ITERATIONS}, 0 <= shown <= {MAX_SHOWN}"
                " and 1 <= cycle_cap < 2**31"
            )
        raw = self._native.trace(block, self.compile(table), iterations, shown, cycle_cap)
        return Trace.from_native(raw, max(len(block), 1), iterations)

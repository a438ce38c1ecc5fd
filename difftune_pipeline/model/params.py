"""Parameter tables as tensors: DiffTune's per-opcode parameter vectors, the
sampling presets, and extraction of valid integer tables.

A ``ParamSpace`` fixes an ordering: rows (the parameter-row keys of the blocks
being tuned) × columns (latency, µops, 7 ReadAdvance slots, explicit cycles per
processor resource), plus the globals (the two of llvm-mca's model, then those
of the extended model's mechanisms). Sampled tables are regenerated from
``(preset, seed)`` over a space, as DiffTune did, so millions of samples stay small.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from difftune_pipeline.engine import LIMITS, Engine, extended, mechanisms
from difftune_pipeline.engine.extended import PLAIN
from difftune_pipeline.engine.table import GLOBALS, ParamTable

READ_ADVANCE_SLOTS = 7
PRESETS = ("difftune", "perturb")
NestPorts = Callable[[list[tuple[str, int]], list[str]], list[tuple[str, int]]]


@dataclass(frozen=True)
class ParamSpace:
    keys: tuple[str, ...]  # parameter-row keys, sorted
    resources: tuple[str, ...]  # every processor resource of the model
    units: tuple[str, ...]  # the single ports (resources that are not groups)
    nest_ports: NestPorts = field(compare=False, repr=False)  # the engine's port-nesting rule
    globals: tuple[str, ...] = GLOBALS  # the table's globals, in ParamTable.global_names() order
    model: str = PLAIN  # the table's model (ParamTable.model): its harness changes what a table simulates
    # The values of ``table`` over the rows and its globals, hashed, under the
    # extended model: its defaults are not LLVM's, and samples are drawn around them.
    origin: str = ""

    @classmethod
    def create(cls, keys, engine: Engine, table: ParamTable | None = None) -> ParamSpace:
        """The space of rows ``keys`` of ``engine``'s CPU, with the globals and model of ``table``."""
        resources = engine.resources()
        keys = tuple(sorted(set(keys)))
        origin = ""
        if table is not None and table.mechanisms:
            values = json.dumps([{k: table.rows.get(k) for k in keys}, table.globals], sort_keys=True)
            origin = hashlib.sha256(values.encode()).hexdigest()[:16]
        return cls(
            keys,
            tuple(r["name"] for r in resources),
            tuple(r["name"] for r in resources if not r["is_group"]),
            engine.nested_ports,
            tuple(table.global_names()) if table else GLOBALS,
            table.model if table else PLAIN,
            origin,
        )

    @property
    def columns(self) -> list[str]:
        return (
            ["latency", "uops"]
            + [f"read_advance[{u}]" for u in range(READ_ADVANCE_SLOTS)]
            + [f"port:{r}" for r in self.resources]
        )

    @property
    def width(self) -> int:
        return 2 + READ_ADVANCE_SLOTS + len(self.resources)

    def fingerprint(self) -> str:
        # llvm-mca's spaces keep their ids: LLVM's own model is fixed by the LLVM version
        revision = mechanisms.revision(extended.named(self.model))
        extra = [self.globals, self.model, self.origin, revision] if self.model != PLAIN else []
        text = json.dumps([self.keys, self.resources, *extra])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ---- table <-> matrix -------------------------------------------------
    def encode(self, table: ParamTable) -> tuple[np.ndarray, np.ndarray]:
        """(rows × columns, globals) of ``table``; rows it lacks are zero."""
        m = np.zeros((len(self.keys), self.width), dtype=np.float32)
        for i, key in enumerate(self.keys):
            row = table.rows.get(key)
            if row is not None:
                m[i] = self.encode_row(row)
        g = np.array([table.globals[k] for k in self.globals], dtype=np.float32)
        return m, g

    def encode_row(self, row: dict) -> np.ndarray:
        """One parameter row as the matrix of ``encode`` holds it."""
        v = np.zeros(self.width, dtype=np.float32)
        v[0] = row["latency"][0] if row["latency"] else 0
        v[1] = row["uops"]
        for use, _, cycles in row["read_advance"]:
            if use < READ_ADVANCE_SLOTS:
                v[2 + use] = cycles
        for res, cycles in row["ports"].items():
            v[self._port_columns[res]] = cycles
        return v

    @functools.cached_property
    def _port_columns(self) -> dict[str, int]:
        return {r: 2 + READ_ADVANCE_SLOTS + i for i, r in enumerate(self.resources)}

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Each row key's row in the matrix."""
        return {k: i for i, k in enumerate(self.keys)}

    def decode(self, matrix: np.ndarray, globals_: np.ndarray, start: ParamTable) -> ParamTable:
        """A valid integer table: ``round(abs(x))`` clamped to the valid ranges,
        written over ``start`` (rows outside the space keep their values).

        Latency: every def of a row moves by the same amount as its first def.
        ReadAdvance: slot u sets every entry of use index u (created if absent).
        Ports: explicit cycles per resource; resources listed in ``start`` stay listed.
        """
        x = np.rint(np.abs(np.asarray(matrix, dtype=np.float64))).astype(np.int64)
        g = np.rint(np.abs(np.asarray(globals_, dtype=np.float64))).astype(np.int64)
        latency_max, port_max = LIMITS["latency"][1], LIMITS["port_cycles"][1]
        out = start.copy()
        if tuple(start.global_names()) != self.globals:
            raise ValueError(f"the space's globals {self.globals} are not the table's ({start.model})")
        out.globals = {name: int(np.clip(v, *LIMITS[name])) for name, v in zip(self.globals, g)}
        for i, key in enumerate(self.keys):
            base = start.rows.get(key)
            if base is None:
                continue
            v = x[i]
            lat0 = int(min(v[0], latency_max))
            latency = [int(np.clip(lat + lat0 - base["latency"][0], 0, latency_max)) for lat in base["latency"]]
            if not latency and lat0:
                latency = [lat0]
            # Partially overlapping resources with cycles are refused by the engine: keep the larger.
            ports = self.nest_ports(
                [(r, int(min(c, port_max))) for r, c in zip(self.resources, v[2 + READ_ADVANCE_SLOTS :])],
                [r for r, c in base["ports"].items() if c > 0],
            )
            ports = {r: c for r, c in ports if c > 0 or r in base["ports"]}
            uops = int(min(v[1], LIMITS["uops"][1]))
            if any(ports.values()):
                uops = max(uops, 1)
            slots = {u: int(np.clip(v[2 + u], *LIMITS["read_advance"])) for u in range(READ_ADVANCE_SLOTS)}
            read_advance = [[u, w, slots[u] if u in slots else c] for u, w, c in base["read_advance"]]
            present = {u for u, _, _ in base["read_advance"]}
            read_advance += [[u, 0, c] for u, c in slots.items() if u not in present and c != 0]
            out.rows[key] = {"latency": latency, "uops": uops, "read_advance": sorted(read_advance), "ports": ports}
        return out

    # ---- sampling ---------------------------------------------------------
    def sample(self, preset: str, seed: int, default: ParamTable) -> tuple[np.ndarray, np.ndarray]:
        """The (matrix, globals) of sampled table ``(preset, seed)``, deterministic."""
        if preset not in PRESETS:
            raise ValueError(f"unknown sampling preset {preset!r}; one of {PRESETS}")
        rng = np.random.default_rng([seed, PRESETS.index(preset), int(self.fingerprint(), 16) % (1 << 63)])
        n, units = len(self.keys), [self.resources.index(u) for u in self.units]
        if preset == "difftune":
            # DiffTune's preset (uniform integers, ignores the defaults).
            m = np.zeros((n, self.width), dtype=np.float32)
            m[:, 0] = rng.integers(0, 6, n)
            m[:, 1] = np.maximum(1, rng.integers(0, 6, n))
            m[:, 2 : 2 + READ_ADVANCE_SLOTS] = rng.integers(0, 6, (n, READ_ADVANCE_SLOTS))
            for i in range(n):
                chosen = rng.choice(units, size=rng.integers(0, 3), replace=False)
                m[i, [2 + READ_ADVANCE_SLOTS + c for c in chosen]] = rng.integers(0, 3, len(chosen))
            g = [rng.integers(1, 11), rng.integers(50, 251)]
            g += [rng.integers(lo, hi + 1) for lo, hi in (mechanisms.PARAMETERS[x].sample for x in self.globals[2:])]
            return m, np.array(g, dtype=np.float32)
        # Around the defaults: each value moves by ±1..2 with probability 0.3
        # (ports only where the default has cycles), and a row gains a random
        # single port with probability 0.1.
        m, g = self.encode(default)
        moved = rng.random(m.shape) < 0.3
        moved[:, 2 + READ_ADVANCE_SLOTS :] &= m[:, 2 + READ_ADVANCE_SLOTS :] > 0
        step = rng.choice([-2, -1, 1, 2], size=m.shape)
        m = np.where(moved, np.maximum(0, m + step), m).astype(np.float32)
        extra = rng.random(n) < 0.1
        cols = 2 + READ_ADVANCE_SLOTS + rng.choice(units, size=n)
        m[extra, cols[extra]] += 1
        m[:, 1] = np.where(m[:, 2 + READ_ADVANCE_SLOTS :].sum(1) > 0, np.maximum(m[:, 1], 1), m[:, 1])
        out = [max(1, g[0] + rng.integers(-2, 3)), max(2, round(g[1] * rng.uniform(0.5, 1.5)))]
        for name, value in zip(self.globals[2:], g[2:]):
            step = mechanisms.PARAMETERS[name].step
            moved = value * rng.uniform(0.5, 1.5) if step is None else value + rng.integers(-step, step + 1)
            out.append(int(np.clip(round(moved), *LIMITS[name])))
        return m, np.array(out, dtype=np.float32)

    def sampled_table(self, preset: str, seed: int, default: ParamTable) -> ParamTable:
        m, g = self.sample(preset, seed, default)
        return self.decode(m, g, default)

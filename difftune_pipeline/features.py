"""Hardware features of a block (after XFeatur): what it reads and writes, its
memory traffic and memory dependencies, its dependency chains, and the port
pressure and dispatch load under a parameter table.

Registers come from LLVM's instruction descriptions (``Block.operands``:
explicit and implicit operands, widened to the full register, reads of zero
idioms dropped), not from the assembly text. The dependency graph is the one
the structured surrogate differentiates through (``structured.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from difftune_pipeline.engine import ParamTable

FEATURES = ["n_insts", "n_uops", "regs_read", "regs_written", "loads", "stores", "memory_deps",
            "loop_carried_memory_deps", "chain_cycles", "loop_carried_cycles", "port_pressure_cycles",
            "dispatch_cycles", "bottleneck"]
UNROLL = 8  # iterations unrolled to measure the loop-carried recurrence


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    distance: int       # 0: within an iteration; 1: from the previous iteration
    kind: str           # "register" | "address" (a register of the address) | "memory" (store -> load)


def dependencies(operands: list[dict]) -> list[Edge]:
    """Read-after-write edges: each read depends on the last write before it in
    the block, or, when none, on the last write of the previous iteration.
    Memory: a load depends on the last store through the same address expression."""
    edges = []
    for j, op in enumerate(operands):
        address_regs = set(op["address"].split(",")) if op["address"] else set()
        for reg in op["reads"]:
            src = _last(operands, j, lambda o: reg in o["writes"])
            if src is not None:
                edges.append(Edge(src[0], j, src[1], "address" if reg in address_regs else "register"))
        if op["may_load"] and op["address"]:
            src = _last(operands, j, lambda o: o["may_store"] and o["address"] == op["address"])
            if src is not None:
                edges.append(Edge(src[0], j, src[1], "memory"))
    return edges


def _last(operands: list[dict], j: int, writes) -> tuple[int, int] | None:
    for i in range(j - 1, -1, -1):
        if writes(operands[i]):
            return i, 0
    for i in range(len(operands) - 1, j - 1, -1):
        if writes(operands[i]):
            return i, 1
    return None


def latency_bounds(n: int, edges: list[Edge], latency: np.ndarray, advance: np.ndarray) -> tuple[float, float]:
    """(critical path of one iteration, loop-carried cycles per iteration) with
    unlimited resources. An edge costs the producer's latency, less the
    consumer's ReadAdvance when it is a register operand (not an address)."""
    incoming = [[] for _ in range(n)]
    for e in edges:
        if e.kind != "memory":  # llvm-mca assumes no aliasing: stores do not feed loads
            weight = max(0.0, latency[e.src] - (advance[e.dst] if e.kind == "register" else 0.0))
            incoming[e.dst].append((e.src, e.distance, weight))
    t = np.zeros(n)
    finish = []
    for k in range(UNROLL):
        prev, t = t, np.zeros(n)
        for j in range(n):
            for src, distance, weight in incoming[j]:
                if distance == 0:
                    t[j] = max(t[j], t[src] + weight)
                elif k > 0:
                    t[j] = max(t[j], prev[src] + weight)
        finish.append(float(np.max(t + latency)) if n else 0.0)
    half = UNROLL // 2
    return finish[0], (finish[-1] - finish[half - 1]) / (UNROLL - half)


def containment(resources: list[dict]) -> np.ndarray:
    """C[s, r] = 1/|units(r)| when resource s's units all lie in r: the pressure on
    r is the cycles of everything that must run inside it, spread over its units."""
    members = [frozenset(r["members"]) if r["is_group"] else frozenset([r["name"]]) for r in resources]
    out = np.zeros((len(resources), len(resources)))
    for s, ms in enumerate(members):
        for r, mr in enumerate(members):
            if ms <= mr:
                out[s, r] = 1.0 / len(mr)
    return out


def block_features(block, table: ParamTable, resources: list[dict], contain: np.ndarray | None = None) -> dict:
    """The features of one decoded block under ``table``."""
    ops = block.operands
    rows = [table.rows.get(k, {"latency": [], "uops": 0, "read_advance": [], "ports": {}}) for k in block.row_keys]
    names = [r["name"] for r in resources]
    contain = containment(resources) if contain is None else contain
    latency = np.array([r["latency"][0] if r["latency"] else 0 for r in rows], dtype=float)  # the first def, as tuned
    advance = np.array([max((c for _, _, c in r["read_advance"]), default=0) for r in rows], dtype=float)
    ports = np.zeros(len(names))
    for r in rows:
        for res, cycles in r["ports"].items():
            ports[names.index(res)] += cycles
    edges = dependencies(ops)
    chain, carried = latency_bounds(len(ops), edges, latency, advance)
    uops = sum(r["uops"] for r in rows)
    pressure = float((ports @ contain).max()) if len(names) else 0.0
    dispatch = uops / table.globals["dispatch_width"]
    bounds = {"port_pressure": pressure, "dispatch": dispatch, "loop_carried_latency": carried}
    return {
        "n_insts": len(ops), "n_uops": uops,
        "regs_read": len({r for o in ops for r in o["reads"]}),
        "regs_written": len({r for o in ops for r in o["writes"]}),
        "loads": sum(o["may_load"] for o in ops), "stores": sum(o["may_store"] for o in ops),
        "memory_deps": sum(e.kind == "memory" for e in edges),
        "loop_carried_memory_deps": sum(e.kind == "memory" and e.distance == 1 for e in edges),
        "chain_cycles": chain, "loop_carried_cycles": carried,
        "port_pressure_cycles": pressure, "dispatch_cycles": dispatch,
        "bottleneck": max(bounds, key=bounds.get),
    }


def features_frame(block_ids: list[str], blocks: list, table: ParamTable, resources: list[dict]) -> pl.DataFrame:
    contain = containment(resources)
    rows = [{"block_id": b, "mcpu": table.mcpu, **block_features(block, table, resources, contain)}
            for b, block in zip(block_ids, blocks)]
    schema = {"block_id": pl.Utf8, "mcpu": pl.Utf8, **{f: pl.Float64 for f in FEATURES}, "bottleneck": pl.Utf8}
    for f in ("n_insts", "n_uops", "regs_read", "regs_written", "loads", "stores", "memory_deps", "loop_carried_memory_deps"):
        schema[f] = pl.Int64
    return pl.DataFrame(rows, schema=schema)

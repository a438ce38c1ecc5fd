"""Hardware features of a block (after XFeatur): what it reads and writes, its
memory traffic and memory dependencies, its dependency chains, and the port
pressure and dispatch load under a parameter table.

Registers come from LLVM's instruction descriptions (``Block.operands``:
explicit and implicit operands, widened to the full register, reads of zero
idioms dropped), not from the assembly text. The dependency graph and its
recurrence are ``graph.py``'s, the ones the structured surrogate differentiates through.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.graph import BlockGraphs, dependencies, latency_bounds

COUNTS = (
    "n_insts",
    "n_uops",
    "regs_read",
    "regs_written",
    "loads",
    "stores",
    "memory_deps",
    "loop_carried_memory_deps",
)
FEATURES = [*COUNTS, "chain_cycles", "loop_carried_cycles", "port_pressure_cycles", "dispatch_cycles", "bottleneck"]
EMPTY_ROW = {"latency": [], "uops": 0, "read_advance": [], "ports": {}}
BATCH = 256  # blocks whose dependency chains are computed together


def containment(resources: list[dict]) -> np.ndarray:
    """C[s, r] = 1/|units(r)| when resource s's units all lie in r: the pressure on
    r is the cycles of everything that must run inside it, spread over its units.
    A resource that is no group may have several units itself (Sandy and Ivy
    Bridge's two load ports, ``SBPort23``), and a group counts its members' units."""
    members = [frozenset(r["members"]) if r["is_group"] else frozenset([r["name"]]) for r in resources]
    out = np.zeros((len(resources), len(resources)))
    for s, ms in enumerate(members):
        for r, mr in enumerate(members):
            if ms <= mr:
                out[s, r] = 1.0 / resources[r]["num_units"]
    return out


def block_features(block, table: ParamTable, resources: list[dict], contain: np.ndarray | None = None) -> dict:
    """The features of one decoded block under ``table``."""
    return _features([block], table, resources, containment(resources) if contain is None else contain)[0]


def features_frame(block_ids: list[str], blocks: list, table: ParamTable, resources: list[dict]) -> pl.DataFrame:
    contain = containment(resources)
    rows = []
    for start in range(0, len(blocks), BATCH):
        rows += _features(blocks[start : start + BATCH], table, resources, contain)
    rows = [{"block_id": b, "mcpu": table.mcpu, **f} for b, f in zip(block_ids, rows)]
    schema = {"block_id": pl.Utf8, "mcpu": pl.Utf8, **{f: pl.Float64 for f in FEATURES}, "bottleneck": pl.Utf8}
    for f in COUNTS:
        schema[f] = pl.Int64
    return pl.DataFrame(rows, schema=schema)


def _features(blocks: list, table: ParamTable, resources: list[dict], contain: np.ndarray) -> list[dict]:
    """Features of a batch of blocks; the dependency chains of all of them at once."""
    names = {r["name"]: i for i, r in enumerate(resources)}
    operands = [b.operands for b in blocks]
    edges = [dependencies(ops) for ops in operands]
    graphs = BlockGraphs.build(edges, [len(ops) for ops in operands])
    batch = graphs.select(list(range(len(blocks))))
    latency = torch.zeros(len(blocks), batch.width, dtype=torch.float64)
    advance = torch.zeros(len(blocks), batch.width, dtype=torch.float64)
    out = []
    for b, block in enumerate(blocks):
        rows = [table.rows.get(k, EMPTY_ROW) for k in block.row_keys]
        for i, r in enumerate(rows):
            latency[b, i] = r["latency"][0] if r["latency"] else 0  # the first def, as tuned
            advance[b, i] = max((c for _, _, c in r["read_advance"]), default=0)
        ports = np.zeros(len(names))
        for r in rows:
            for res, cycles in r["ports"].items():
                ports[names[res]] += cycles
        uops = sum(r["uops"] for r in rows)
        ops = operands[b]
        out.append(
            {
                "n_insts": len(ops),
                "n_uops": uops,
                "regs_read": len({r for o in ops for r in o["reads"]}),
                "regs_written": len({r for o in ops for r in o["writes"]}),
                "loads": sum(o["may_load"] for o in ops),
                "stores": sum(o["may_store"] for o in ops),
                "memory_deps": sum(e.kind == "memory" for e in edges[b]),
                "loop_carried_memory_deps": sum(e.kind == "memory" and e.distance == 1 for e in edges[b]),
                "port_pressure_cycles": float((ports @ contain).max()) if len(names) else 0.0,
                "dispatch_cycles": uops / table.globals["dispatch_width"],
            }
        )
    chain, carried = latency_bounds(latency, advance, batch)
    for f, c, k in zip(out, chain.tolist(), carried.tolist()):
        f["chain_cycles"], f["loop_carried_cycles"] = c, k
        bounds = {
            "port_pressure": f["port_pressure_cycles"],
            "dispatch": f["dispatch_cycles"],
            "loop_carried_latency": k,
        }
        f["bottleneck"] = max(bounds, key=bounds.get)
    return out

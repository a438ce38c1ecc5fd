"""The simulated dataset: (block, sampled table) pairs run through the engine.

Work is sharded by table; a shard writes its results in chunks, each chunk in
its own transaction, and skips the pairs already stored, so an interrupted run
resumes without repeating or duplicating work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from difftune_pipeline import store
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.params import ParamSpace


@dataclass(frozen=True)
class SampledTable:
    table_id: str
    preset: str
    seed: int


def sampled_tables(space: ParamSpace, mcpu: str, presets: list[str], per_preset: int) -> list[SampledTable]:
    return [SampledTable(f"{preset}-{seed}-{mcpu}-{space.fingerprint()}", preset, seed)
            for preset in presets for seed in range(per_preset)]


def shard_of(table_id: str, shards: int) -> int:
    return int(hashlib.sha256(table_id.encode()).hexdigest()[:8], 16) % shards


def planned_blocks(table: SampledTable, block_ids: list[str], per_table: int) -> list[str]:
    """The blocks simulated under ``table``: all, or a fixed random subset."""
    ordered = sorted(block_ids)
    if per_table <= 0 or per_table >= len(ordered):
        return ordered
    rng = np.random.default_rng([table.seed, int(hashlib.sha256(table.table_id.encode()).hexdigest()[:8], 16)])
    return sorted(rng.choice(ordered, size=per_table, replace=False).tolist())


def run_shard(db, engine: Engine, space: ParamSpace, default: ParamTable, tables: list[SampledTable],
              blocks: dict[str, object], per_table: int, shard: str, iterations: int = 100,
              chunk: int = 4000, threads: int | None = None) -> dict[str, int]:
    """Simulate every planned (block, table) pair of ``tables`` not yet stored."""
    done = store.query(
        "SELECT block_id, table_id FROM simulations WHERE iterations = ? AND table_id IN (SELECT unnest(?))",
        db, [iterations, [t.table_id for t in tables]])
    have = set(zip(done["block_id"].to_list(), done["table_id"].to_list()))
    planned = [(b, t) for t in tables for b in planned_blocks(t, list(blocks), per_table)]
    todo = [(b, t) for b, t in planned if (b, t.table_id) not in have]
    compiled: dict[str, ParamTable] = {}
    written = 0
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        needed = list(dict.fromkeys(t for _, t in part))
        for t in needed:
            if t.table_id not in compiled:
                compiled[t.table_id] = space.sampled_table(t.preset, t.seed, default)
        block_ids = list(dict.fromkeys(b for b, _ in part))
        bpos = {b: i for i, b in enumerate(block_ids)}
        tpos = {t.table_id: i for i, t in enumerate(needed)}
        result = engine.simulate_pairs([blocks[b] for b in block_ids], [compiled[t.table_id] for t in needed],
                                       [bpos[b] for b, _ in part], [tpos[t.table_id] for _, t in part],
                                       iterations=iterations, threads=threads)
        frame = pl.DataFrame({
            "block_id": [b for b, _ in part], "table_id": [t.table_id for _, t in part],
            "mcpu": engine.mcpu, "llvm_version": engine.llvm_version, "iterations": iterations,
            "cycles": [int(c) if s == "ok" else None for c, s in zip(result.cycles, result.status)],
            "status": result.status, "shard": shard,
        }, schema_overrides={"cycles": pl.Int64, "iterations": pl.Int32})
        with store.writer(db) as con:
            for t in needed:
                store.save_table(con, t.table_id, compiled[t.table_id], kind="sampled", preset=t.preset,
                                 seed=t.seed, space_id=space.fingerprint(), values=False)
            written += store.insert_new(con, "simulations", frame, ["block_id", "table_id", "iterations"])
        for t in needed:  # free tables whose pairs are all done
            if all(tt.table_id != t.table_id for _, tt in todo[start + chunk:]):
                compiled.pop(t.table_id, None)
    return {"planned": len(planned), "already_done": len(planned) - len(todo), "simulated": written}

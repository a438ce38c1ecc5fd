"""The simulated dataset: sampled tables named by (preset, seed), which blocks
each is simulated on, which shard simulates it, and the simulated pairs as
training tensors.

Sampled tables are regenerated from ``(preset, seed)`` over a parameter space,
as DiffTune did, so millions of samples stay small.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.params import ParamSpace


@dataclass(frozen=True)
class SampledTable:
    table_id: str
    preset: str
    seed: int


def sampled_tables(space: ParamSpace, mcpu: str, presets, per_preset: int) -> list[SampledTable]:
    return [
        SampledTable(f"{preset}-{seed}-{mcpu}-{space.fingerprint()}", preset, seed)
        for preset in presets
        for seed in range(per_preset)
    ]


def shard_of(table_id: str, shards: int) -> int:
    return int(hashlib.sha256(table_id.encode()).hexdigest()[:8], 16) % shards


def planned_blocks(table: SampledTable, block_ids: list[str], per_table: int) -> list[str]:
    """The blocks simulated under ``table``: all, or a fixed random subset."""
    ordered = sorted(block_ids)
    if per_table <= 0 or per_table >= len(ordered):
        return ordered
    rng = np.random.default_rng([table.seed, int(hashlib.sha256(table.table_id.encode()).hexdigest()[:8], 16)])
    return sorted(rng.choice(ordered, size=per_table, replace=False).tolist())


def simulate(
    engine: Engine,
    pairs: list[tuple[str, SampledTable]],
    tables: dict[str, ParamTable],
    blocks: list,
    position: dict[str, int],
    iterations: int,
) -> pl.DataFrame:
    """(block, sampled table) pairs through the engine, as rows of ``simulations``
    (less the shard); ``tables`` holds the regenerated table of each table id,
    ``blocks[position[block_id]]`` each block. The same ``blocks`` list for every
    chunk of a shard lets an engine on Ray ship it once."""
    table_ids = list(dict.fromkeys(t.table_id for _, t in pairs))
    tpos = {t: i for i, t in enumerate(table_ids)}
    result = engine.simulate_pairs(
        blocks,
        [tables[t] for t in table_ids],
        [position[b] for b, _ in pairs],
        [tpos[t.table_id] for _, t in pairs],
        iterations=iterations,
    )
    return pl.DataFrame(
        {
            "block_id": [b for b, _ in pairs],
            "table_id": [t.table_id for _, t in pairs],
            "mcpu": engine.mcpu,
            "llvm_version": engine.llvm_version,
            "iterations": iterations,
            "cycles": [int(c) if s == "ok" else None for c, s in zip(result.cycles, result.status)],
            "status": result.status,
        },
        schema_overrides={"cycles": pl.Int64, "iterations": pl.Int32},
    )


@dataclass
class Pairs:
    """Simulated (block, sampled table) pairs as tensors: what a surrogate trains on."""

    block_ids: list[str]  # the blocks, in block_idx order
    tables: torch.Tensor  # [T, rows + 1, P] raw parameter values; the last row is zeros (no row)
    globals_: torch.Tensor  # [T, 2]
    block_idx: torch.Tensor  # [N]
    table_idx: torch.Tensor  # [N]
    cycles: torch.Tensor  # [N] the engine's


def training_pairs(
    read_table: Callable[[str], pl.DataFrame],
    space: ParamSpace,
    default: ParamTable,
    tables: list[SampledTable],
    block_ids: list[str],
) -> Pairs:
    """The simulated pairs of ``tables`` over ``block_ids``, ordered by block id then
    table id; ``read_table(table_id)`` gives one table's (block_id, cycles) rows. One
    table is read at a time and kept as numbers, so memory grows with the pairs'
    indices, not with their ids' strings."""
    order = sorted(set(block_ids))
    pos = {b: i for i, b in enumerate(order)}
    blocks, table_idx, cycles = [], [], []
    for i, t in enumerate(tables):
        rows = read_table(t.table_id).filter(pl.col("block_id").is_in(order))
        blocks.append(np.fromiter((pos[b] for b in rows["block_id"]), dtype=np.int64, count=rows.height))
        table_idx.append(np.full(rows.height, i, dtype=np.int64))
        cycles.append(rows["cycles"].to_numpy().astype(np.float32))
    b, t, c = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (blocks, table_idx, cycles))
    by_id = np.argsort(np.argsort([t.table_id for t in tables])) if tables else np.zeros(0, np.int64)
    ordered = np.lexsort((by_id[t], b))
    present = np.unique(b)
    encoded = [space.encode(space.sampled_table(s.preset, s.seed, default)) for s in tables]
    return Pairs(
        block_ids=[order[i] for i in present],
        tables=torch.tensor(np.stack([np.vstack([m, np.zeros((1, m.shape[1]), m.dtype)]) for m, _ in encoded])),
        globals_=torch.tensor(np.stack([g for _, g in encoded])),
        block_idx=torch.from_numpy(np.searchsorted(present, b[ordered])),
        table_idx=torch.from_numpy(t[ordered]),
        cycles=torch.from_numpy(c[ordered].astype(np.float32)),
    )

"""Views of the warehouse that the DiffTune stages read: measured blocks per
split, their parameter space, and the simulated pairs as training tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from difftune_pipeline import store
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.params import ParamSpace
from difftune_pipeline.simulations import SampledTable
from difftune_pipeline.surrogate import BlockTensors, TrainingData, Vocabulary, tokens


def measured_blocks(db, uarch: str, splits: list[str]) -> pl.DataFrame:
    """Decoded blocks of ``splits`` with their measured throughput on ``uarch``
    (the mean when several batches measured a block)."""
    return store.query(
        """
        SELECT b.block_id, b.hex, b.asm, b.n_insts, s.split, avg(m.cycles_per_100) AS cycles_per_100
        FROM measurements m JOIN blocks b USING (block_id) JOIN splits s USING (block_id)
        WHERE m.uarch = ? AND b.status = 'ok' AND s.split IN (SELECT unnest(?))
        GROUP BY ALL ORDER BY b.block_id
        """, db, [uarch, splits])


def disassemble(engine: Engine, frame: pl.DataFrame) -> dict[str, object]:
    """block_id -> engine Block, for the rows of ``frame``."""
    return dict(zip(frame["block_id"].to_list(), engine.disassemble_many(frame["hex"].to_list())))


def parameter_space(engine: Engine, blocks: list) -> tuple[ParamSpace, ParamTable]:
    """The rows the blocks use (variant resolutions included) and the default table over them."""
    default = engine.default_table(blocks)
    keys = {k for b in blocks for k in b.row_keys if k in default.rows}
    return ParamSpace.create(keys, engine.resources()), default


def block_inputs(blocks: list) -> list[tuple[list[str], list[str], list[str]]]:
    return [(list(b.opcodes), list(b.asm), list(b.row_keys)) for b in blocks]


def vocabulary(blocks: list) -> Vocabulary:
    return Vocabulary([t for b in blocks for op, line in zip(b.opcodes, b.asm) for t in tokens(op, line)])


@dataclass
class SimulatedPairs:
    """The simulated (block, sampled table) pairs as tensors, for either surrogate."""
    block_ids: list[str]     # the blocks, in block_idx order
    tables: torch.Tensor     # [T, rows + 1, P] raw parameter values; the last row is zeros (no row)
    globals_: torch.Tensor   # [T, 2]
    block_idx: torch.Tensor  # [N]
    table_idx: torch.Tensor  # [N]
    cycles: torch.Tensor     # [N]


def simulated_pairs(db, space: ParamSpace, default: ParamTable, tables: list[SampledTable],
                    blocks: dict[str, object], iterations: int = 100) -> SimulatedPairs:
    """The simulated pairs of ``tables`` over ``blocks`` (status ok only)."""
    sims = store.query(
        "SELECT block_id, table_id, cycles FROM simulations WHERE status = 'ok' AND iterations = ? "
        "AND table_id IN (SELECT unnest(?)) ORDER BY block_id, table_id",
        db, [iterations, [t.table_id for t in tables]]).filter(pl.col("block_id").is_in(list(blocks)))
    block_ids = sorted(set(sims["block_id"].to_list()))
    bpos = {b: i for i, b in enumerate(block_ids)}
    tpos = {t.table_id: i for i, t in enumerate(tables)}
    encoded = [space.encode(space.sampled_table(t.preset, t.seed, default)) for t in tables]
    return SimulatedPairs(
        block_ids=block_ids,
        tables=torch.tensor(np.stack([np.vstack([m, np.zeros((1, m.shape[1]), m.dtype)]) for m, _ in encoded])),
        globals_=torch.tensor(np.stack([g for _, g in encoded])),
        block_idx=torch.tensor([bpos[b] for b in sims["block_id"].to_list()]),
        table_idx=torch.tensor([tpos[t] for t in sims["table_id"].to_list()]),
        cycles=torch.tensor(sims["cycles"].to_numpy(), dtype=torch.float32),
    )


def training_data(db, space: ParamSpace, default: ParamTable, tables: list[SampledTable],
                  blocks: dict[str, object], vocab: Vocabulary, iterations: int = 100) -> TrainingData:
    """The simulated pairs as the LSTM surrogate's tensors."""
    pairs = simulated_pairs(db, space, default, tables, blocks, iterations)
    return TrainingData(
        blocks=BlockTensors.build(block_inputs([blocks[b] for b in pairs.block_ids]), vocab,
                                  {k: i for i, k in enumerate(space.keys)}),
        tables=pairs.tables, globals_=pairs.globals_, block_idx=pairs.block_idx, table_idx=pairs.table_idx,
        cycles=pairs.cycles)

"""The tables the tuning visited, and the engine's simulations of them, recorded
like the sampled tables' (``steps.simulations``): each table in the warehouse
(kind ``visited``, its parent LLVM's table), each of its simulations a Parquet
chunk under the shard ``tuning``, so that ``difftune sql`` reads where the
surrogate was refitted and how close it was there. A train simulation the search
fast-forwarded has its steady state simulated and its Total Cycles extrapolated
(``engine.Engine.simulate``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from difftune_pipeline.engine import DEFAULT_ITERATIONS, ParamTable, SimResult
from difftune_pipeline.steps.context import StepContext
from difftune_pipeline.warehouse import simulations, tables, writer
from difftune_pipeline.warehouse.simulation_files import TUNING, Chunk, chunk_key

Recorder = Callable[[ParamTable, str, SimResult, np.ndarray | None], None]


def recorder(ctx: StepContext, default_id: str, block_ids: dict[str, list[str]]) -> Recorder:
    """``record(table, split, result, positions)``: the engine's ``result`` on the blocks of
    ``split`` (``block_ids[split]``, in their order; only those at ``positions`` when
    given) under ``table``, written and recorded."""
    files = ctx.chunk_writer(TUNING, DEFAULT_ITERATIONS)

    def record(table: ParamTable, split: str, result: SimResult, positions: np.ndarray | None = None) -> None:
        table_id = f"visited-{ctx.uarch}-{table.fingerprint()}"
        ids = block_ids[split] if positions is None else [block_ids[split][i] for i in positions]
        key = chunk_key(ctx.uarch, table.llvm_version, DEFAULT_ITERATIONS, table_id, ids)
        written = files(Chunk(key, table_id, ids), result)
        with writer(ctx.db) as con:
            tables.save_table(con, table_id, table, kind="visited", parent_id=default_id)
            simulations.record_chunks(con, [written])

    return record

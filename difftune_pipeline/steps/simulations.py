"""(train block, sampled table) pairs through the engine, one shard of the
tables at a time. Pairs are planned table by table and simulated in chunks,
each written in its own transaction, skipping the pairs already stored: an
interrupted run resumes without repeating or duplicating work, and memory holds
two chunks, not the shard. The next chunk is simulated while the last one is
written, so the one writer costs time only once it is slower than the engine."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from difftune_pipeline.model.sampling import SampledTable, planned_blocks, shard_of, simulate
from difftune_pipeline.steps.context import StepContext, fingerprint
from difftune_pipeline.warehouse import insert_new, simulations, tables, writer

CHUNK = 4000  # pairs per transaction
PER_WORKER = 256  # pairs per worker in a chunk, at least: many workers get chunks big enough to share


def _todo(ctx: StepContext, mine: list[SampledTable], block_ids: list[str], counts: dict) -> Iterator[tuple]:
    """The shard's pairs not yet stored, table by table (one table's stored pairs read at a time)."""
    for t in mine:
        planned = planned_blocks(t, block_ids, ctx.settings.blocks_per_table)
        have = simulations.simulated_pairs_done(ctx.db, ctx.settings.iterations, [t.table_id])
        counts["planned"] += len(planned)
        counts["already_done"] += sum((b, t.table_id) in have for b in planned)
        yield from ((b, t) for b in planned if (b, t.table_id) not in have)


def simulate_shard(ctx: StepContext, shard: int, chunk: int | None = None) -> dict:
    """Simulate a shard's pairs not yet stored, ``chunk`` pairs per transaction (by
    default CHUNK, or PER_WORKER per simulation the engine runs at once if more)."""
    space, default, blocks = ctx.space()
    mine = [t for t in ctx.sampled_tables(space) if shard_of(t.table_id, ctx.settings.shards) == shard]
    iterations, label = ctx.settings.iterations, f"shard-{shard}"
    # sized on the first pair to simulate: asking a Ray engine its workers connects to the cluster
    size = (lambda: chunk) if chunk else (lambda: max(CHUNK, PER_WORKER * ctx.engine.parallelism))
    ids = sorted(blocks)
    every = ([blocks[b] for b in ids], {b: i for i, b in enumerate(ids)})  # one list for every chunk
    t0 = time.perf_counter()
    counts = {"planned": 0, "already_done": 0}
    written, pending = 0, None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="simulate") as ahead:
        for part in _chunks(_todo(ctx, mine, ids, counts), size):
            simulating = ahead.submit(_simulate_chunk, ctx, part, space, default, every, iterations, label)
            if pending is not None:
                written += _store(ctx, space, *pending.result())
            pending = simulating
        if pending is not None:
            written += _store(ctx, space, *pending.result())
    elapsed = time.perf_counter() - t0
    return {
        **counts,
        "simulated": written,
        "tables": len(mine),
        "seconds": round(elapsed, 1),
        "pairs_per_second": round(written / elapsed, 1) if written else 0.0,
        # what the shard holds: its tables over the train blocks (sampled_tables' version names both)
        "data_version": fingerprint(
            [t.table_id for t in mine], sorted(blocks), ctx.settings.blocks_per_table, iterations
        ),
    }


def _chunks(pairs: Iterator[tuple], size: Callable[[], int]) -> Iterator[list]:
    part, n = [], 0
    for pair in pairs:
        part.append(pair)
        n = n or size()
        if len(part) == n:
            yield part
            part = []
    if part:
        yield part


def _simulate_chunk(
    ctx: StepContext, part: list, space, default, every: tuple, iterations: int, label: str
) -> tuple[list, dict, pl.DataFrame]:
    """One chunk through the engine: (its tables, their regenerated values, its rows)."""
    needed = list(dict.fromkeys(t for _, t in part))
    regenerated = {t.table_id: space.sampled_table(t.preset, t.seed, default) for t in needed}
    frame = simulate(ctx.engine, part, regenerated, *every, iterations).with_columns(pl.lit(label).alias("shard"))
    return needed, regenerated, frame


def _store(ctx: StepContext, space, needed: list, regenerated: dict, frame: pl.DataFrame) -> int:
    """A simulated chunk and its tables' ids, in one transaction; returns the rows added."""
    with writer(ctx.db) as con:
        for t in needed:
            tables.save_table(
                con,
                t.table_id,
                regenerated[t.table_id],
                kind="sampled",
                preset=t.preset,
                seed=t.seed,
                space_id=space.fingerprint(),
                values=False,
            )
        return insert_new(con, "simulations", frame, ["block_id", "table_id", "iterations"])

"""(train block, sampled table) pairs through the engine, one shard of the
tables at a time. A shard writes its results in chunks, each in its own
transaction, and skips the pairs already stored, so an interrupted run resumes
without repeating or duplicating work."""

from __future__ import annotations

import time

import polars as pl

from difftune_pipeline.model.sampling import planned_blocks, shard_of, simulate
from difftune_pipeline.steps.context import StepContext
from difftune_pipeline.warehouse import insert_new, queries, writer

CHUNK = 4000  # pairs per transaction


def simulate_shard(ctx: StepContext, shard: int, chunk: int = CHUNK) -> dict:
    space, default, blocks = ctx.space()
    mine = [t for t in ctx.sampled_tables(space) if shard_of(t.table_id, ctx.settings.shards) == shard]
    iterations, label = ctx.settings.iterations, f"shard-{shard}"
    t0 = time.perf_counter()
    have = queries.simulated_pairs_done(ctx.db, iterations, [t.table_id for t in mine])
    planned = [(b, t) for t in mine for b in planned_blocks(t, list(blocks), ctx.settings.blocks_per_table)]
    todo = [(b, t) for b, t in planned if (b, t.table_id) not in have]
    regenerated, written = {}, 0
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        needed = list(dict.fromkeys(t for _, t in part))
        for t in needed:
            if t.table_id not in regenerated:
                regenerated[t.table_id] = space.sampled_table(t.preset, t.seed, default)
        frame = simulate(ctx.engine, part, regenerated, blocks, iterations).with_columns(pl.lit(label).alias("shard"))
        with writer(ctx.db) as con:
            for t in needed:
                queries.save_table(
                    con,
                    t.table_id,
                    regenerated[t.table_id],
                    kind="sampled",
                    preset=t.preset,
                    seed=t.seed,
                    space_id=space.fingerprint(),
                    values=False,
                )
            written += insert_new(con, "simulations", frame, ["block_id", "table_id", "iterations"])
        later = {t.table_id for _, t in todo[start + chunk :]}
        for t in needed:  # free tables whose pairs are all done
            if t.table_id not in later:
                regenerated.pop(t.table_id, None)
    elapsed = time.perf_counter() - t0
    return {
        "planned": len(planned),
        "already_done": len(planned) - len(todo),
        "simulated": written,
        "tables": len(mine),
        "seconds": round(elapsed, 1),
        "pairs_per_second": round(written / elapsed, 1) if written else 0.0,
    }

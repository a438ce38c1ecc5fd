"""(train block, sampled table) pairs through the engine, one shard of the
tables at a time, in chunks of one table's blocks. Whoever simulates a chunk
(a Ray worker, or this process) writes it as a Parquet file
(``warehouse.simulation_files``); this step only records which chunks exist, a
short transaction per batch of finished chunks, so no single writer limits how
many workers simulate. A recorded chunk whose file was since deleted, truncated
or altered (its SHA-256 is checked) is forgotten and simulated again. A chunk's
file is named by what it simulated, and the chunks are cut the same way on every run from the pairs not yet recorded: a
killed worker's chunk is simulated again into the same file, and a killed step
resumes without repeating a recorded chunk or recording one twice."""

from __future__ import annotations

import time
from collections.abc import Iterator

from difftune_pipeline.model.sampling import SampledTable, planned_blocks, shard_of
from difftune_pipeline.steps.context import StepContext, fingerprint
from difftune_pipeline.steps.results import ShardSimulated
from difftune_pipeline.warehouse import simulations, tables, writer
from difftune_pipeline.warehouse.simulation_files import Chunk, chunk_key, resolve, sizes

CHUNK = 512  # pairs per chunk: a worker's task of a second or two, and one file
RECORD_EVERY = 2.0  # seconds between transactions that record finished chunks


def _chunks(ctx: StepContext, space, default, mine: list[SampledTable], position: dict, size: int, counts: dict):
    """(table, block positions, Chunk) of the shard's pairs not yet recorded, table by
    table: each table's remaining planned blocks cut into ``size`` pairs."""
    iterations = ctx.settings.iterations
    for t in mine:
        planned = planned_blocks(t, sorted(position), ctx.settings.blocks_per_table)
        have = simulations.simulated_pairs_done(ctx.db, iterations, [t.table_id])
        todo = [b for b in planned if (b, t.table_id) not in have]
        counts["planned"] += len(planned)
        counts["already_done"] += len(planned) - len(todo)
        if not todo:
            continue
        table = space.sampled_table(t.preset, t.seed, default)
        for start in range(0, len(todo), size):
            piece = todo[start : start + size]
            key = chunk_key(ctx.uarch, ctx.engine.llvm_version, iterations, t.table_id, piece)
            yield table, [position[b] for b in piece], Chunk(key, t.table_id, piece)


def simulate_shard(ctx: StepContext, shard: int, chunk: int = CHUNK, log=print) -> ShardSimulated:
    """Simulate a shard's pairs not yet recorded, ``chunk`` pairs per file; each recorded
    chunk's file is checked in full first."""
    space, default, blocks = ctx.space()
    mine = [t for t in ctx.sampled_tables(space) if shard_of(t.table_id, ctx.settings.shards) == shard]
    by_id = {t.table_id: t for t in mine}
    iterations = ctx.settings.iterations
    ids = sorted(blocks)
    files = ctx.chunk_writer(f"shard-{shard}", iterations)
    started, t0 = time.time(), time.perf_counter()
    damaged = simulations.damaged_chunks(ctx.db, list(by_id))
    for _, file, why in damaged:  # deleted, truncated or altered since it was recorded: simulated again
        log(f"simulation chunk {resolve(ctx.db, file)}: {why}: forgotten, simulated again")
    if damaged:
        with writer(ctx.db) as con:
            simulations.forget_chunks(con, [key for key, _, _ in damaged])
    counts = {"planned": 0, "already_done": 0}
    written, finished, last = 0, [], time.perf_counter()
    todo: Iterator = _chunks(ctx, space, default, mine, {b: i for i, b in enumerate(ids)}, chunk, counts)
    try:
        for record in ctx.engine.simulate_chunks([blocks[b] for b in ids], todo, files, iterations=iterations):
            finished.append(record)
            if time.perf_counter() - last >= RECORD_EVERY:
                written += _record(ctx, space, by_id, finished)
                finished, last = [], time.perf_counter()
    finally:  # an interrupted step still records the chunks whose files are written
        written += _record(ctx, space, by_id, finished)
    elapsed = time.perf_counter() - t0
    return ShardSimulated(
        **counts,
        simulated=written,
        damaged_chunks_redone=len(damaged),
        tables=len(mine),
        stale_files_removed=files.remove_stale(started),
        seconds=round(elapsed, 1),
        pairs_per_second=round(written / elapsed, 1) if written else 0.0,
        # what the shard holds: its tables over the train blocks (sampled_tables' version names both)
        data_version=fingerprint([t.table_id for t in mine], sorted(blocks), ctx.settings.blocks_per_table, iterations),
    )


def _record(ctx: StepContext, space, by_id: dict[str, SampledTable], records: list[dict]) -> int:
    """Finished chunks and their tables' ids, in one transaction; returns the rows recorded."""
    if not records:
        return 0
    unseen = [r["file"] for r, size in zip(records, sizes(ctx.db, [r["file"] for r in records])) if size != r["bytes"]]
    if unseen:
        raise FileNotFoundError(
            f"{len(unseen)} chunk file(s) the workers wrote are not here, e.g. {resolve(ctx.db, unseen[0])}: "
            "workers on other hosts need DIFFTUNE_SIMULATIONS on storage every host reaches (a shared disk, s3://…)"
        )
    with writer(ctx.db) as con:
        for table_id in dict.fromkeys(r["table_id"] for r in records):
            t = by_id[table_id]
            tables.save_sampled(
                con, table_id, ctx.uarch, ctx.engine.llvm_version, t.preset, t.seed, space.fingerprint()
            )
        simulations.record_chunks(con, records)
    return sum(r["rows"] for r in records)

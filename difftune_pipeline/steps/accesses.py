"""Where the measured blocks' loads and stores land under the harness model
they were measured with (tables ``block_harness``, ``block_accesses``): the
extended model's memory dependencies read them, and SQL can ask which blocks
alias. A block the harness model cannot run keeps symbolic addresses, with the
reason in ``block_harness.status``."""

from __future__ import annotations

import time

import polars as pl

from difftune_pipeline import harness
from difftune_pipeline.steps.context import SPLITS, StepContext
from difftune_pipeline.steps.results import AccessesRecorded
from difftune_pipeline.warehouse import harness_records, writer

CHUNK = 500  # blocks per transaction


def record_accesses(ctx: StepContext) -> AccessesRecorded:
    """Emulates the µarch's measured blocks not yet recorded under the harness model."""
    name = ctx.harness
    blocks = {b: block for split in SPLITS for b, block in ctx.blocks(split, attach=False)[1].items()}
    done = harness_records.harness_recorded(ctx.db, name)
    todo = sorted(b for b in blocks if b not in done)
    for start in range(0, len(todo), CHUNK):
        status, accesses = [], []
        for block_id in todo[start : start + CHUNK]:
            t0 = time.perf_counter()
            got = harness.accesses(blocks[block_id], name)
            seconds = time.perf_counter() - t0
            status.append((block_id, name, got.harness, got.status, len(got.rows), seconds))
            accesses += [(block_id, name, seq, *row) for seq, row in enumerate(got.rows)]
        with writer(ctx.db) as con:
            harness_records.save_accesses(con, _frame(status, STATUS_SCHEMA), _frame(accesses, ACCESS_SCHEMA))
    summary = harness_records.harness_summary(ctx.db, name, list(blocks))
    return AccessesRecorded(name, len(blocks), len(todo), **summary)


ACCESS_SCHEMA = {
    "block_id": pl.Utf8,
    "harness": pl.Utf8,
    "seq": pl.Int32,
    "iteration": pl.Int32,
    "instr": pl.Int32,
    "address": pl.UInt64,
    "bytes": pl.Int32,
    "is_store": pl.Boolean,
}
STATUS_SCHEMA = {
    "block_id": pl.Utf8,
    "harness": pl.Utf8,
    "addresses": pl.Utf8,
    "status": pl.Utf8,
    "accesses": pl.Int64,
    "seconds": pl.Float64,
}


def _frame(rows: list[tuple], schema: dict) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row")

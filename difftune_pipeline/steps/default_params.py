"""LLVM's own table for the µarch: every opcode, plus the variant resolutions
of the measured blocks."""

from __future__ import annotations

from difftune_pipeline.steps.context import StepContext
from difftune_pipeline.warehouse import queries, writer


def default_params(ctx: StepContext) -> dict:
    table_id, table = ctx.default_table()
    with writer(ctx.db) as con:
        new = queries.save_table(con, table_id, table, kind="default", note="LLVM's scheduling model")
    return {"table_id": table_id, "rows": len(table.rows), "new": new}

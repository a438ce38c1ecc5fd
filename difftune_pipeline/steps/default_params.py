"""LLVM's own table for the µarch: every opcode, plus the variant resolutions
of the measured blocks, under the model the steps simulate with."""

from __future__ import annotations

from difftune_pipeline.steps.context import StepContext, fingerprint
from difftune_pipeline.steps.results import DefaultTable
from difftune_pipeline.warehouse import ingestion, tables, writer


def default_params(ctx: StepContext) -> DefaultTable:
    """The table stored, and a data version that changes with the table and with
    the µarch's usable measurements: what the tuning downstream re-runs on."""
    ctx.choose_model_on_val()
    table_id, table = ctx.default_table()
    with writer(ctx.db) as con:
        new = tables.save_table(con, table_id, table, kind="default", note="LLVM's scheduling model")
    measured = ingestion.measurement_totals(ctx.db, ctx.uarch)
    _, _, why = ctx.model()
    return DefaultTable(
        table_id, table.model, why, len(table.rows), new, measured[0], f"{table_id}-{fingerprint(measured)}"
    )

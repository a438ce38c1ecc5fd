"""Parameter tables sampled from ``(preset, seed)`` over the train blocks'
parameter space; only their ids are stored, their values are regenerated."""

from __future__ import annotations

from difftune_pipeline.steps.context import StepContext, fingerprint
from difftune_pipeline.warehouse import writer


def sampled_tables(ctx: StepContext) -> dict:
    space, default, train = ctx.space()
    tables = ctx.sampled_tables(space)
    with writer(ctx.db) as con:
        new = sum(
            tables.save_table(
                con,
                t.table_id,
                default,
                kind="sampled",
                preset=t.preset,
                seed=t.seed,
                space_id=space.fingerprint(),
                values=False,
            )
            for t in tables
        )
    return {
        "space_id": space.fingerprint(),
        "rows": len(space.keys),
        "columns": space.width,
        "tables": len(tables),
        "new_tables": new,
        "data_version": fingerprint([t.table_id for t in tables], sorted(train)),
    }

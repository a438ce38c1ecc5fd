"""Parameter tables sampled from ``(preset, seed)`` over the train blocks'
parameter space; only their ids are stored, their values are regenerated."""

from __future__ import annotations

from difftune_pipeline.steps.context import StepContext, fingerprint
from difftune_pipeline.steps.results import TablesSampled
from difftune_pipeline.warehouse import tables, writer


def sampled_tables(ctx: StepContext) -> TablesSampled:
    space, default, train = ctx.space()
    sampled = ctx.sampled_tables(space)
    with writer(ctx.db) as con:
        new = sum(
            tables.save_sampled(con, t.table_id, ctx.uarch, default.llvm_version, t.preset, t.seed, space.fingerprint())
            for t in sampled
        )
    return TablesSampled(
        space_id=space.fingerprint(),
        rows=len(space.keys),
        columns=space.width,
        tables=len(sampled),
        new_tables=new,
        data_version=fingerprint([t.table_id for t in sampled], sorted(train)),
    )

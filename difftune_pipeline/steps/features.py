"""Hardware features of every measured block under LLVM's table (table ``block_features``)."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.model.features import features_frame
from difftune_pipeline.steps.context import SPLITS, StepContext
from difftune_pipeline.steps.results import FeaturesComputed
from difftune_pipeline.warehouse import evaluation, insert_new, writer


def block_features(ctx: StepContext) -> FeaturesComputed:
    """Computes only the blocks not stored yet under this table."""
    table_id, table = ctx.default_table()
    blocks = {b: blk for split in SPLITS for b, blk in ctx.blocks(split)[1].items()}
    done = evaluation.feature_block_ids(ctx.db, table_id)
    todo = [b for b in blocks if b not in done]
    frame = features_frame(todo, [blocks[b] for b in todo], table, ctx.engine.resources())
    with writer(ctx.db) as con:
        insert_new(
            con, "block_features", frame.with_columns(pl.lit(table_id).alias("table_id")), ["block_id", "table_id"]
        )
    return FeaturesComputed(table_id, len(blocks), len(todo), evaluation.bottleneck_counts(ctx.db, table_id))

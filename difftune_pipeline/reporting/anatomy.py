"""Where the error lives: the blocks predicted within 20% of their measurement
against the rest, and per slice (instruction class, bottleneck, length, the
assists, the unexplained blocks) how many blocks, their MAPE, their share of all
the error, their share of the pairs Kendall's tau counts against the table (a
slice can carry little of the MAPE and much of the rank error: blocks measured
at 1.5 cycles among hundreds at 1.0) and how many of them are more than 20% off.
The evaluation's slices hold the memberships; this reads them against one
table's predictions."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.model.metrics import discordant_pairs

OFF = 0.20  # a block further than this from its measurement is in the tail


def anatomy(predicted: pl.DataFrame, table: str, memberships: pl.DataFrame) -> pl.DataFrame:
    """Per slice of ``memberships`` (block_id, slice), plus the blocks within and
    beyond ``OFF``: blocks, MAPE, share of the whole error, share of the discordant
    pairs (each pair half its two blocks') and share of its blocks beyond ``OFF``
    (percentages), for the predictions in column ``table`` of ``predicted``
    (block_id, measured, one column per table), largest error share first."""
    scored = predicted.filter(pl.col(table).is_not_null())
    errors = scored.select(
        "block_id",
        ((pl.col(table) - pl.col("measured")).abs() / pl.col("measured")).alias("error"),
        pl.Series("discordant", discordant_pairs(scored[table], scored["measured"])),
    )
    total, pairs = errors["error"].sum(), errors["discordant"].sum()
    tail = pl.when(pl.col("error") > OFF).then(pl.lit(f"beyond {OFF:.0%}")).otherwise(pl.lit(f"within {OFF:.0%}"))
    parts = pl.concat(
        [
            errors.select("block_id", pl.lit("all").alias("slice")),
            errors.select("block_id", tail.alias("slice")),
            memberships.filter(pl.col("slice") != "all").select("block_id", "slice"),
        ]
    )
    return (
        parts.join(errors, on="block_id")
        .group_by("slice")
        .agg(
            pl.len().alias("blocks"),
            (100 * pl.col("error").mean()).round(2).alias("mape_pct"),
            (100 * pl.col("error").sum() / total).round(1).alias("error_share_pct"),
            (100 * pl.col("discordant").sum() / max(pairs, 1)).round(1).alias("discordant_share_pct"),
            (100 * (pl.col("error") > OFF).mean()).round(1).alias("beyond_20_pct"),
        )
        .sort(["error_share_pct", "slice"], descending=[True, False])
    )

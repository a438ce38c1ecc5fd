"""Default against learned: per-slice comparison, the parameters that moved,
and engine cycles beside measured ones."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.engine.table import diff
from difftune_pipeline.warehouse import queries


def compare(evaluations: pl.DataFrame, default_id: str, learned_id: str) -> pl.DataFrame:
    """Default against learned per (split, slice), with the slices made worse flagged."""
    d = evaluations.filter(pl.col("table_id") == default_id).select(
        "split", "slice", "n", pl.col("mape").alias("default_mape"), pl.col("kendall_tau").alias("default_tau")
    )
    learned = evaluations.filter(pl.col("table_id") == learned_id).select(
        "split", "slice", pl.col("mape").alias("learned_mape"), pl.col("kendall_tau").alias("learned_tau")
    )
    return (
        d.join(learned, on=["split", "slice"])
        .with_columns((pl.col("learned_mape") > pl.col("default_mape") + 1e-12).alias("worse"))
        .sort(["split", "slice"])
    )


def changed_parameters(default: ParamTable, learned: ParamTable, top: int = 20) -> pl.DataFrame:
    """The opcodes whose parameters moved most (sum of absolute changes)."""
    moved = diff(default, learned)
    if moved.is_empty():
        return moved
    return (
        moved.group_by("opcode")
        .agg(
            pl.col("delta").abs().sum().alias("total_change"),
            (
                pl.col("param")
                + pl.lit(": ")
                + pl.col("base").cast(pl.Utf8)
                + pl.lit("→")
                + pl.col("value").cast(pl.Utf8)
            )
            .str.join(", ")
            .alias("changes"),
        )
        .sort("total_change", descending=True)
        .head(top)
    )


def predicted_vs_measured(db, uarch: str, tables: dict[str, str], split: str = "test") -> pl.DataFrame:
    """block_id, hex, measured and one column of engine cycles per named table (``{name: table_id}``)."""
    blocks = queries.measured_blocks(db, uarch, [split])
    frame = blocks.select("block_id", "hex", pl.col("cycles_per_100").alias("measured"))
    for name, table_id in tables.items():
        frame = frame.join(queries.predictions(db, table_id).rename({"cycles": name}), on="block_id", how="left")
    return frame

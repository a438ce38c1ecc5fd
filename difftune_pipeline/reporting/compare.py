"""llvm-mca as shipped, LLVM's table under the chosen model and the learned
table: per-slice comparison, the slices made worse, the parameters that moved,
and engine cycles beside measured ones."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.engine import MEASURES, ParamTable
from difftune_pipeline.engine.table import diff
from difftune_pipeline.model.metrics import MIN_SLICE_BLOCKS, WORSE_POINTS, worse_slices
from difftune_pipeline.warehouse import evaluation, ingestion


def compare(evaluations: pl.DataFrame, tables: dict[str, str], worse: pl.DataFrame) -> pl.DataFrame:
    """The tables side by side per (split, slice) of the learned table's evaluation:
    n, then each table's MAPE and Kendall tau (``{name: table_id}``, columns
    ``<name>_mape``, ``<name>_tau`` with ``-`` as ``_``); ``worse`` (from
    ``metrics.worse_slices`` of the learned table against the default on test): the
    learned table is worse there by more than noise; ``worse_within_noise``: its MAPE
    is higher, but not by a difference that holds up."""
    out = evaluations.filter(pl.col("table_id") == tables["learned"]).select("split", "slice", "n")
    for name, table_id in tables.items():
        col = name.replace("-", "_")
        part = evaluations.filter(pl.col("table_id") == table_id).select(
            "split", "slice", pl.col("mape").alias(f"{col}_mape"), pl.col("kendall_tau").alias(f"{col}_tau")
        )
        out = out.join(part, on=["split", "slice"], how="left")
    holds = worse.filter(pl.col("holds")).select("slice", pl.lit("test").alias("split"), pl.lit(True).alias("worse"))
    higher = pl.col("learned_mape") > pl.col("default_mape") + 1e-12
    return (
        out.join(holds, on=["split", "slice"], how="left")
        .with_columns(pl.col("worse").fill_null(False))
        .with_columns((higher & ~pl.col("worse") & (pl.col("split") == "test")).alias("worse_within_noise"))
        .sort(["split", "slice"])
    )


def three_tables(
    db, uarch: str, tables: dict[str, str], evaluations: pl.DataFrame, measure: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(``predicted_vs_measured`` of the test split, ``compare`` of the tables with the
    slices the learned table makes worse than the default by more than noise), as
    ``measure`` reads the predictions."""
    predicted = predicted_vs_measured(db, uarch, tables, measure=measure)
    worse = worse_slices(errors(predicted, "default", "learned"), evaluation.block_slices(db, uarch))
    return predicted, compare(evaluations, tables, worse)


def worse_summary(comparison: pl.DataFrame) -> str:
    """One line: the test slices the learned table makes worse by more than noise,
    and how many others are worse only within noise."""
    test = comparison.filter(pl.col("split") == "test")
    worse = test.filter(pl.col("worse"))["slice"].to_list()
    noise = test.filter(pl.col("worse_within_noise")).height
    text = ", ".join(worse) if worse else "none"
    if noise:
        text += (
            f"; {noise} other slice{'s' if noise > 1 else ''} worse only within noise "
            f"(fewer than {MIN_SLICE_BLOCKS} blocks, or a bootstrap 95% interval that includes no change)"
        )
    return text


def errors(predicted: pl.DataFrame, base: str, new: str) -> pl.DataFrame:
    """block_id, base_error, new_error: each block's absolute relative error under
    two table columns of ``predicted_vs_measured`` (blocks both simulated)."""
    return predicted.drop_nulls([base, new]).select(
        "block_id",
        ((pl.col(base) - pl.col("measured")).abs() / pl.col("measured")).alias("base_error"),
        ((pl.col(new) - pl.col("measured")).abs() / pl.col("measured")).alias("new_error"),
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


def predicted_vs_measured(
    db, uarch: str, tables: dict[str, str], split: str = "test", measure: str = "steady"
) -> pl.DataFrame:
    """block_id, hex, measured and one column of engine cycles per 100 iterations (as
    ``measure`` reads them) per named table (``{name: table_id}``)."""
    blocks = ingestion.measured_blocks(db, uarch, [split])
    frame = blocks.select("block_id", "hex", pl.col("cycles_per_100").alias("measured"))
    for name, table_id in tables.items():
        predicted = evaluation.predictions(db, table_id, measure).rename({"cycles": name})
        frame = frame.join(predicted, on="block_id", how="left")
    return frame


def by_measure(db, uarch: str, tables: dict[str, str]) -> pl.DataFrame:
    """The test split's overall MAPE and Kendall tau of each named table
    (``{name: table_id}``) under each measure: measure, table, table_id, mape, kendall_tau."""
    names = pl.DataFrame({"table": list(tables), "table_id": list(tables.values())})
    return (
        pl.concat(
            evaluation.evaluations(db, uarch, list(tables.values()), m).with_columns(pl.lit(m).alias("measure"))
            for m in MEASURES
        )
        .filter((pl.col("split") == "test") & (pl.col("slice") == "all"))
        .join(names, on="table_id")
        .select("measure", "table", "table_id", "mape", "kendall_tau")
    )


def worse_share(predicted: pl.DataFrame, base: str, new: str, points: float = WORSE_POINTS) -> float | None:
    """The share of blocks whose error under table column ``new`` exceeds their error
    under ``base`` by more than ``points`` (0.20: 20 percentage points); None without blocks."""
    both = errors(predicted, base, new)
    if both.is_empty():
        return None
    return float((both["new_error"] - both["base_error"] > points).mean())

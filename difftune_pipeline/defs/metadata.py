"""Translating the core's results for Dagster: tables as markdown, row counts,
and verdicts as check results."""

from __future__ import annotations

import dagster as dg
import polars as pl

from difftune_pipeline.quality import Verdict
from difftune_pipeline.reporting.plots import markdown_image
from difftune_pipeline.reporting.report import explained_changes, explained_summary
from difftune_pipeline.warehouse import connection


def markdown(frame: pl.DataFrame) -> dg.MetadataValue:
    return dg.MetadataValue.md(_markdown_text(frame))


def _markdown_text(frame: pl.DataFrame) -> str:
    if frame.is_empty():
        return "_none_"
    with pl.Config(
        tbl_formatting="MARKDOWN",
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
        tbl_rows=-1,
        tbl_cols=-1,
        fmt_str_lengths=200,
    ):
        return str(frame)


def explained(e: dict) -> dg.MetadataValue:
    """A notable block explained (reporting.report.explained_blocks): its code, the
    cycles and bottleneck per table, the rows that differ, its figures."""
    if "error" in e:
        return dg.MetadataValue.md(f"**{e['case']}**: block `{e['block_id']}`: {e['error']}")
    parts = [
        f"**{e['case']}**: block `{e['block_id']}`",
        "```\n" + "\n".join(e["explanation"]["asm"]) + "\n```",
        _markdown_text(explained_summary(e)),
        "Rows of this block where the tables differ (cycles once that change alone is undone):",
        _markdown_text(explained_changes(e)),
        *(markdown_image(png, "timeline") for png in e["timelines"]),
    ]
    if e["pressure"] is not None:
        parts.append(markdown_image(e["pressure"], "port pressure"))
    return dg.MetadataValue.md("\n\n".join(parts))


def row_count(warehouse, table: str) -> dict:
    """Dagster's standard row-count entry for the warehouse table an asset writes."""
    return {"dagster/row_count": connection.row_count(warehouse.path, table)}


def blocking_check(
    name: str, asset: str, description: str, partitions_def: dg.PartitionsDefinition | None
) -> dg.AssetCheckSpec:
    """A check that, failing, stops everything downstream of ``asset``. It takes the
    asset's partitions: a check of a partitioned asset holds one verdict per partition,
    so one µarch's failure neither blocks nor frees another's."""
    return dg.AssetCheckSpec(name, asset=asset, blocking=True, description=description, partitions_def=partitions_def)


def check_result(name: str, verdict: Verdict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name, passed=verdict.passed, description=verdict.description, metadata=verdict.metadata
    )


def split_test_figures(overall: pl.DataFrame) -> dict:
    """The test split's overall MAPE (%) and Kendall tau of each table (None before any block is evaluated)."""
    row = overall.row(0, named=True) if overall.height else {}
    figure = lambda col, scale, digits: None if row.get(col) is None else round(scale * row[col], digits)  # noqa: E731
    out = {}
    for name in ("llvm_mca", "default", "learned"):
        out[f"test_{name}_mape_pct"] = figure(f"{name}_mape", 100, 2)
        out[f"test_{name}_kendall_tau"] = figure(f"{name}_tau", 1, 3)
    return out

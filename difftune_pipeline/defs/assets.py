"""The one way the pipeline declares an asset: its group, its kinds, what it
follows, and whether it writes the warehouse (then it takes the writer's pool:
DuckDB has one writer per file)."""

from __future__ import annotations

import dagster as dg

WRITER_POOL = "duckdb_writer"


def asset(
    group: str,
    *,
    kinds: set[str],
    deps: list | None = None,
    partitions: dg.PartitionsDefinition | None = None,
    writes: bool = True,
    automation: dg.AutomationCondition | None = None,
    checks: list[dg.AssetCheckSpec] | None = None,
):
    """``dg.asset`` with the pipeline's conventions."""
    return dg.asset(
        group_name=group,
        kinds=kinds,
        deps=deps,
        partitions_def=partitions,
        pool=WRITER_POOL if writes else None,
        automation_condition=automation,
        check_specs=checks,
    )

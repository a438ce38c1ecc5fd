"""Ingestion assets: measurement batches and the block corpus become blocks,
measurements, block sources, splits and quarantine in the warehouse."""

import dagster as dg
import polars as pl

from difftune_pipeline.defs import versions
from difftune_pipeline.defs.assets import asset
from difftune_pipeline.defs.automation import FOLLOWS_UPSTREAM
from difftune_pipeline.defs.metadata import blocking_check, check_result, markdown, row_count
from difftune_pipeline.defs.partitions import add_uarchs
from difftune_pipeline.defs.resources import DataSources, EngineResource, Warehouse
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.steps.checks import measurement_sanity
from difftune_pipeline.warehouse import ingestion
from difftune_pipeline.warehouse import versions as store

GROUP = "ingest"
SANITY = "measurement_sanity"
SANITY_DESCRIPTION = "Few rows quarantined; throughputs a real core can reach"


def batch_metadata(summaries: list[ingest.BatchSummary]) -> dict:
    frame = pl.DataFrame([s.as_dict() for s in summaries]) if summaries else pl.DataFrame()
    new = [s for s in summaries if not s.already_ingested]
    return {
        "files": len(summaries),
        "new_batches": len(new),
        "rows_read": sum(s.n_read for s in new),
        "rows_ingested": sum(s.n_ingested for s in new),
        "rows_quarantined": sum(s.n_quarantined for s in new),
        "batches": markdown(frame.drop("kind", "note") if not frame.is_empty() else frame),
        **({"warning": "; ".join(notes)} if (notes := [s.note for s in summaries if s.note]) else {}),
    }


def _stored(
    context: dg.AssetExecutionContext, warehouse: Warehouse, table: str, metadata: dict
) -> dg.MaterializeResult:
    """The asset's result, its data version a fingerprint of its table's rows."""
    return versions.materialized(context, warehouse.path, store.table_version(warehouse.path, table), metadata)


@asset(GROUP, kinds={"duckdb"})
def block_sources(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, sources: DataSources
) -> dg.MaterializeResult:
    """The BHive block corpus (``hex,frequency`` per application) in table
    ``block_sources``: which application each block comes from. New blocks are
    disassembled into ``blocks``; bad rows go to ``quarantine``."""
    summaries = [ingest.ingest_corpus(f, warehouse.path, engine.decoder()) for f in sources.corpus_files]
    return _stored(
        context, warehouse, "block_sources", {**batch_metadata(summaries), **row_count(warehouse, "block_sources")}
    )


@asset(GROUP, kinds={"duckdb"}, checks=[blocking_check(SANITY, "measurements", SANITY_DESCRIPTION, None)])
def measurements(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, sources: DataSources):
    """Measured throughputs (BHive's ``hex,cycles per 100 iterations``, one µarch
    per batch) in table ``measurements``. A batch already ingested adds nothing;
    a µarch measured for the first time becomes a partition of the DiffTune assets."""
    summaries = [
        ingest.ingest_measurements(f.path, f.uarch, warehouse.path, engine.decoder(), f.unit)
        for f in sources.measurement_files
    ]
    added = add_uarchs(context.instance, ingestion.measured_uarchs(warehouse.path))
    yield _stored(
        context,
        warehouse,
        "measurements",
        {
            **batch_metadata(summaries),
            "new_uarchs": ", ".join(added) or "none",
            **row_count(warehouse, "measurements"),
        },
    )
    yield check_result(SANITY, measurement_sanity(warehouse.path, [s.batch_id for s in summaries]))


# What reads the ingested data, and writes nothing.
AFTER_INGESTION = {
    "deps": [block_sources, measurements, "measurement_batches"],
    "kinds": {"duckdb"},
    "automation": FOLLOWS_UPSTREAM,
    "writes": False,
}


@asset(GROUP, **AFTER_INGESTION)
def blocks(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """Every distinct block, disassembled by LLVM (opcodes, AT&T text); blocks
    LLVM cannot decode stay, quarantined with the reason."""
    counts = ingestion.block_status_counts(warehouse.path)
    by_status = dict(zip(counts["status"].to_list(), counts["n"].to_list()))
    return _stored(
        context,
        warehouse,
        "blocks",
        {
            "blocks_ok": by_status.get("ok", 0),
            "blocks_quarantined": by_status.get("quarantined", 0),
            "by_status": markdown(counts),
            **row_count(warehouse, "blocks"),
        },
    )


@asset(GROUP, deps=[blocks], kinds={"duckdb"}, automation=FOLLOWS_UPSTREAM)
def splits(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """train/val/test (80/10/10) by block hash: stable as data grows, so no
    block ever moves between splits."""
    counts = ingest.assign_splits(warehouse.path)
    return _stored(
        context, warehouse, "splits", {**{f"n_{k}": v for k, v in counts.items()}, **row_count(warehouse, "splits")}
    )


@asset(GROUP, **AFTER_INGESTION)
def quarantine(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """Input rows that never became a measurement or a block source, each with a
    reason (table ``quarantine``)."""
    reasons = ingestion.quarantine_reasons(warehouse.path)
    return _stored(
        context,
        warehouse,
        "quarantine",
        {
            "rows": int(reasons["n"].sum()) if not reasons.is_empty() else 0,
            "top_reasons": markdown(reasons),
            **row_count(warehouse, "quarantine"),
        },
    )

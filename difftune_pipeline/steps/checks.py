"""The quality gates over the warehouse: each reads what it judges and returns
``quality.Verdict``; the Dagster layer turns verdicts into blocking checks."""

from __future__ import annotations

from difftune_pipeline import quality
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.warehouse import batch_state, ingestion


def measurement_sanity(db, batch_ids: list[str]) -> quality.Verdict:
    return quality.measurement_sanity(batch_state.batch_statuses(db, batch_ids) if batch_ids else None, batch_ids)


def engine_exactness(db, engine: Engine) -> quality.Verdict:
    """The engine against the ``llvm-mca`` binary on 40 measured blocks, default table."""
    return quality.engine_exactness(
        engine, ingestion.exactness_sample(db, engine.mcpu), lambda blocks: llvm_mca_many(blocks, engine.mcpu)
    )

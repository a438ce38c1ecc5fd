"""The quality gates over the warehouse: each reads what it judges and returns
``quality.Verdict``; the Dagster layer turns verdicts into blocking checks."""

from __future__ import annotations

from difftune_pipeline import quality
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.warehouse import queries, writer


def measurement_sanity(db, batch_ids: list[str]) -> quality.Verdict:
    """Judge the batches and record each one's verdict in ``batches.status``: a
    batch that fails never feeds tuning (``usable_measurements``), now or later."""
    rows = queries.batch_sanity(db, batch_ids, quality.MAX_IPC) if batch_ids else None
    verdict = quality.measurement_sanity(rows, batch_ids)
    failed = verdict.metadata.get("failed", {})
    if rows is not None and not rows.is_empty():
        with writer(db) as con:
            queries.set_batch_status(con, [b for b in rows["batch_id"] if b not in failed], "ok", None)
            for batch_id, reason in failed.items():
                queries.set_batch_status(con, [batch_id], "failed_sanity", reason)
    return verdict


def engine_exactness(db, engine: Engine) -> quality.Verdict:
    """The engine against the ``llvm-mca`` binary on 40 measured blocks, default table."""
    return quality.engine_exactness(
        engine, queries.exactness_sample(db, engine.mcpu), lambda blocks: llvm_mca_many(blocks, engine.mcpu)
    )

"""Default and learned tables through the real engine on val and test:
predictions and per-slice metrics, stored once per (table, µarch)."""

from __future__ import annotations

import polars as pl

from difftune_pipeline.engine import MEASURES, extended
from difftune_pipeline.model.features import is_x87
from difftune_pipeline.model.metrics import metrics_by_slice, slices
from difftune_pipeline.reporting.compare import by_measure, changed_parameters, three_tables, worse_share
from difftune_pipeline.reporting.report import explained_blocks, load_figures, save_figures, scatter_png
from difftune_pipeline.steps.context import CODE_VERSIONS, StepContext, fingerprint
from difftune_pipeline.steps.results import Evaluated
from difftune_pipeline.warehouse import connection, evaluation, harness_records, ingestion, insert_new, tables, writer
from difftune_pipeline.warehouse.simulations import PREDICTED


def evaluate(ctx: StepContext, table_ids: list[str]) -> pl.DataFrame:
    """The ``evaluations`` rows of ``table_ids``, evaluating those not stored yet."""
    todo = [t for t in table_ids if not evaluation.evaluated(ctx.db, t, ctx.uarch)]
    if not todo and evaluation.has_block_slices(ctx.db, ctx.uarch):  # the slices cost a simulation of llvm-mca's table
        return evaluation.evaluations(ctx.db, ctx.uarch, table_ids, ctx.settings.measure)
    (val_frame, val_blocks), (test_frame, test_blocks) = ctx.blocks("val"), ctx.blocks("test")
    frame, blocks = pl.concat([val_frame, test_frame]), {**val_blocks, **test_blocks}
    memberships = slices(
        frame.select("block_id", "n_insts", "asm"),
        ingestion.block_sources(ctx.db),
        evaluation.bottlenecks(ctx.db, ctx.default_table()[0]),
        [_store_load(ctx), _above_16_bytes(ctx, frame, blocks), _x87_assists(frame)],
    )
    with writer(ctx.db) as con:
        evaluation.save_block_slices(con, ctx.uarch, memberships)
    iterations, now = ctx.settings.iterations, connection.now()
    for table_id in todo:
        table = tables.load_table(ctx.db, table_id)
        result = ctx.engine.simulate([blocks[b] for b in frame["block_id"]], table, iterations=iterations)
        ok = result.ok
        pred = pl.DataFrame(
            {
                "table_id": table_id,
                "block_id": frame["block_id"],
                "iterations": iterations,
                "cycles": pl.Series(result.cycles).set(pl.Series(~ok), None),
                "status": result.status,
                "steady_cycles_per_100": pl.Series(result.steady).set(pl.Series(~ok), None),
            },
            schema_overrides={"cycles": pl.Int64, "iterations": pl.Int32},
        )
        metrics = pl.concat(  # both measures, so the report can set them side by side
            metrics_by_slice(
                pred.select("block_id", pl.col(PREDICTED[measure]).cast(pl.Float64).alias("cycles")),
                frame.select("block_id", "cycles_per_100"),
                frame.select("block_id", "split"),
                memberships,
            ).with_columns(pl.lit(measure).alias("measure"))
            for measure in MEASURES
        )
        with writer(ctx.db) as con:
            insert_new(con, "predictions", pred, ["table_id", "block_id", "iterations"])
            insert_new(
                con,
                "evaluations",
                metrics.with_columns(
                    pl.lit(table_id).alias("table_id"),
                    pl.lit(ctx.uarch).alias("uarch"),
                    pl.lit(now).alias("evaluated_at"),
                ),
                ["table_id", "uarch", "measure", "split", "slice"],
            )
    return evaluation.evaluations(ctx.db, ctx.uarch, table_ids, ctx.settings.measure)


def _store_load(ctx: StepContext) -> pl.DataFrame:
    """``mem:store_load``: blocks in which a load reads bytes an earlier store
    wrote, at the addresses the harness model recorded."""
    return harness_records.aliasing_blocks(ctx.db, ctx.harness).select(
        "block_id", pl.lit("mem:store_load").alias("slice")
    )


def _x87_assists(frame: pl.DataFrame) -> pl.DataFrame:
    """``assist:x87``: blocks that compute on the x87 stack. BHive's harness leaves the
    x87 registers empty and fills memory with 0x2324000, a denormal as a double, and
    the x87 unit has no denormals-are-zero: each such operation takes a microcode
    assist of a hundred cycles or more (measured 300 to 35,000 cycles per 100
    iterations where every model predicts a few hundred). No model here has assists:
    the slice says which blocks that error comes from, and they stay in every figure."""
    x87 = [b for b, lines in zip(frame["block_id"], frame["asm"].str.split("\n")) if any(map(is_x87, lines))]
    return pl.DataFrame({"block_id": x87, "slice": "assist:x87"}, schema={"block_id": pl.Utf8, "slice": pl.Utf8})


def _above_16_bytes(ctx: StepContext, frame: pl.DataFrame, blocks: dict) -> pl.DataFrame:
    """``fe:above_16B``: blocks llvm-mca's own table runs faster than 16
    instruction bytes a cycle, more than the legacy decoders predecode."""
    ids, iterations = frame["block_id"].to_list(), ctx.settings.iterations
    result = ctx.engine.simulate([blocks[b] for b in ids], ctx.llvm_default(), iterations=iterations)
    per_iteration = [sum(len(h) // 2 for h in blocks[b].encoding) for b in ids]
    above = [
        b
        for b, n, c, ok in zip(ids, per_iteration, result.cycles, result.ok)
        if ok and c > 0 and n * iterations / c > 16
    ]
    return pl.DataFrame({"block_id": above, "slice": "fe:above_16B"}, schema={"block_id": pl.Utf8, "slice": pl.Utf8})


def evaluate_latest(ctx: StepContext) -> Evaluated:
    """Three tables compared per (split, slice), scored by the ``measure`` setting (the
    other measure's test figures beside them): llvm-mca as shipped, LLVM's table
    under the chosen model, and the newest learned one; the share of test blocks the
    learned table predicts more than 20 points worse than the default; the slices where the
    learned table is worse than the default by more than noise; the parameters
    that moved most, the predicted-vs-measured figure (also written under
    ``reports/``) and the notable blocks explained. The figures and explanations
    are kept per comparison, so evaluating again with nothing changed redraws nothing."""
    llvm_id, llvm = ctx.llvm_mca_table()
    default_id, default = ctx.default_table()
    learned_id = tables.latest_learned(ctx.db, ctx.uarch)
    if learned_id is None:
        raise ValueError(f"no learned table for {ctx.uarch}: materialise learned_params first")
    compared = {"llvm-mca": llvm_id, "default": default_id, "learned": learned_id}
    with writer(ctx.db) as con:
        tables.save_table(con, llvm_id, llvm, kind="baseline", note="llvm-mca as shipped: LLVM's table and model")
    evaluations = evaluate(ctx, list(dict.fromkeys(compared.values())))
    measure = ctx.settings.measure
    predicted, comparison = three_tables(ctx.db, ctx.uarch, compared, evaluations, measure)
    worse = worse_share(predicted, "default", "learned")
    learned = tables.load_table(ctx.db, learned_id)
    model = extended.label(default.mechanisms, default.harness, default.mcpu)
    key = fingerprint(compared, ingestion.measurement_totals(ctx.db, ctx.uarch), CODE_VERSIONS["evaluation"])
    figures = load_figures(ctx.db, ctx.uarch, key)
    reused = figures is not None
    if not reused:
        figures = save_figures(
            ctx.db,
            ctx.uarch,
            key,
            scatter_png(predicted, ctx.uarch),
            explained_blocks(ctx.engine, predicted, default, learned),
        )
    with writer(ctx.db) as con:
        evaluation.record_comparison(con, ctx.uarch, llvm_id, default_id, learned_id, model, measure, worse)
    return Evaluated(
        tables=compared,
        model=model,
        measure=measure,
        test_worse_share=worse,
        by_measure=by_measure(ctx.db, ctx.uarch, compared),
        comparison=comparison,
        changed=changed_parameters(default, learned),
        figures_reused=reused,
        **figures,
    )

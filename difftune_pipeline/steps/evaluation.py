"""Default and learned tables through the real engine on val and test:
predictions and per-slice metrics, stored once per (table, µarch)."""

from __future__ import annotations

import numpy as np
import polars as pl

from difftune_pipeline.engine import MEASURES, extended, generations, mechanisms
from difftune_pipeline.model.graph import throughput_floors
from difftune_pipeline.model.metrics import metrics_by_slice, slices
from difftune_pipeline.reporting.compare import by_measure, changed_parameters, three_tables, worse_share
from difftune_pipeline.reporting.figures import load_figures, save_figures
from difftune_pipeline.reporting.report import explained_blocks, scatter_png
from difftune_pipeline.steps.context import CODE_VERSIONS, StepContext, fingerprint
from difftune_pipeline.steps.results import Evaluated
from difftune_pipeline.warehouse import connection, evaluation, harness_records, ingestion, insert_new, tables, writer
from difftune_pipeline.warehouse.simulations import PREDICTED


def evaluate(ctx: StepContext, table_ids: list[str]) -> pl.DataFrame:
    """The ``evaluations`` rows of ``table_ids``, evaluating those not stored yet."""
    todo = [t for t in table_ids if not evaluation.evaluated(ctx.db, t, ctx.uarch)]
    code = CODE_VERSIONS["evaluation"]
    drawn = evaluation.has_block_slices(ctx.db, ctx.uarch, code)
    if not todo and drawn:  # the slices cost a simulation of every table
        return evaluation.evaluations(ctx.db, ctx.uarch, table_ids, ctx.settings.measure)
    if not drawn:  # slices drawn by other code: every table's figures are drawn again with them
        todo = list(table_ids)
    (val_frame, val_blocks), (test_frame, test_blocks) = ctx.blocks("val"), ctx.blocks("test")
    frame, blocks = pl.concat([val_frame, test_frame]), {**val_blocks, **test_blocks}
    listed, iterations = [blocks[b] for b in frame["block_id"]], ctx.settings.iterations
    (llvm_id, llvm), (default_id, default) = ctx.llvm_mca_table(), ctx.default_table()
    known = {llvm_id: llvm, default_id: default}  # most often among table_ids: simulated once
    results = {
        t: ctx.engine.simulate(listed, known.get(t) or tables.load_table(ctx.db, t), iterations=iterations)
        for t in dict.fromkeys([llvm_id, default_id, *table_ids])
    }
    memberships = slices(
        frame.select("block_id", "n_insts", "asm"),
        ingestion.block_sources(ctx.db),
        evaluation.bottlenecks(ctx.db, ctx.default_table()[0]),
        [
            _store_load(ctx),
            _above_16_bytes(frame, listed, results[llvm_id], iterations),
            _x87_faults(frame, listed),
            _unexplained(frame, list(results.values()), ctx.settings.measure),
            _below_floor(frame, listed, ctx.uarch),
        ],
    )
    with writer(ctx.db) as con:
        evaluation.save_block_slices(con, ctx.uarch, memberships, code)
        evaluation.forget_evaluations(con, ctx.uarch, todo)
    now = connection.now()
    for table_id in todo:
        result = results[table_id]
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


def _x87_faults(frame: pl.DataFrame, blocks: list) -> pl.DataFrame:
    """``assist:x87``: blocks whose x87 stack faults once it has settled (the
    ``x87_stack`` mechanism: BHive's harness starts with the stack empty, so a block
    that pushes more than it pops, or pops more, faults every iteration, and each
    fault is a microcode assist of hundreds of cycles)."""
    faulting = [b for b, block in zip(frame["block_id"], blocks) if any(x87 for _, _, x87 in block.serialising)]
    return _slice(faulting, "assist:x87")


def _above_16_bytes(frame: pl.DataFrame, blocks: list, llvm, iterations: int) -> pl.DataFrame:
    """``fe:above_16B``: blocks llvm-mca's own table (its simulation ``llvm``) runs
    faster than 16 instruction bytes a cycle, more than the legacy decoders predecode."""
    per_iteration = [sum(len(h) // 2 for h in block.encoding) for block in blocks]
    above = [
        b
        for b, n, c, ok in zip(frame["block_id"], per_iteration, llvm.cycles, llvm.ok)
        if ok and c > 0 and n * iterations / c > 16
    ]
    return _slice(above, "fe:above_16B")


def _unexplained(frame: pl.DataFrame, results: list, measure: str) -> pl.DataFrame:
    """``unexplained:10x_slower`` and ``unexplained:10x_faster``: blocks measured at
    ten times (or a tenth of) what every table of ``results`` predicts (llvm-mca's,
    LLVM's values under the chosen model with its mechanisms, and the tables
    evaluated, the learned one among them), so no model of the harness here, nor
    learning, accounts for them. They stay in every figure; the slice says where
    that error comes from."""
    measured = frame["cycles_per_100"].to_numpy()
    ratios = [np.where(r.ok, r.predicted(measure), np.nan) / measured for r in results]
    slower = np.all([r <= 0.1 for r in ratios], axis=0)
    faster = np.all([r >= 10 for r in ratios], axis=0)
    ids = frame["block_id"]
    return pl.concat(
        [
            _slice(ids.filter(pl.Series(slower)).to_list(), "unexplained:10x_slower"),
            _slice(ids.filter(pl.Series(faster)).to_list(), "unexplained:10x_faster"),
        ]
    )


# How far under its floor a measurement must sit to be no CPU's: far beyond BHive's
# label noise (2.5-4.4%) and the harness's 1-2 cycles per 100 iterations (harness_offset).
BELOW_FLOOR = 0.75


def _below_floor(frame: pl.DataFrame, listed: list, mcpu: str) -> pl.DataFrame:
    """``unexplained:below_floor``: blocks measured at under three quarters of the
    fewest cycles any table allows them (``graph.throughput_floors``: the instructions
    at the issue width of a core whose front end is modelled, the loop-carried chain
    at a cycle an instruction), which no model explains (BHive's `notq %r15 ; leaq
    -1(%r14,%rbp), %rsi ; andq %r15, %rsi ; movq %rbx, %rdi` at 0.24 cycles an
    iteration on Haswell). Like the others, they stay in every figure."""
    modelled = "front_end" in extended.for_cpu(mcpu)  # the issue width is a fact of the cores it models
    width = mechanisms.issue_width(generations.of(mcpu).name) if modelled else None
    floors = throughput_floors(listed, width)
    below = frame["cycles_per_100"].to_numpy() < BELOW_FLOOR * 100 * floors
    return _slice(frame["block_id"].filter(pl.Series(below)).to_list(), "unexplained:below_floor")


def _slice(block_ids: list[str], name: str) -> pl.DataFrame:
    return pl.DataFrame({"block_id": block_ids, "slice": name}, schema={"block_id": pl.Utf8, "slice": pl.Utf8})


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
    if llvm_id != default_id:  # under llvm-mca's own model the default table is llvm-mca as shipped
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

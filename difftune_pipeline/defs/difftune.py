"""DiffTune assets, one partition per µarch: default table, hardware features,
sampled tables, simulations (µarch × shard), surrogate, learned parameters,
evaluation. Each calls one idempotent stage of ``difftune_pipeline.steps`` and
translates its result; materialising again with nothing changed finds the
stored result and does no work."""

from dataclasses import asdict

import dagster as dg
import polars as pl

from difftune_pipeline import quality, steps
from difftune_pipeline.defs import versions
from difftune_pipeline.defs.assets import asset
from difftune_pipeline.defs.automation import FOLLOWS_UPSTREAM, FOLLOWS_UPSTREAM_DATA
from difftune_pipeline.defs.metadata import (
    blocking_check,
    check_result,
    explained,
    markdown,
    row_count,
    split_test_figures,
)
from difftune_pipeline.defs.partitions import UARCH_SHARDS, UARCHS, shard_index
from difftune_pipeline.defs.resources import Compute, DiffTuneSettings, EngineResource, Warehouse, step_context
from difftune_pipeline.reporting.compare import worse_summary
from difftune_pipeline.reporting.plots import markdown_image
from difftune_pipeline.steps.checks import engine_exactness as exactness
from difftune_pipeline.warehouse import simulations as simulations_store
from difftune_pipeline.warehouse import versions as store

GROUP = "difftune"


@asset(GROUP, deps=["splits"], partitions=UARCHS, kinds={"duckdb", "unicorn"}, automation=FOLLOWS_UPSTREAM)
def block_accesses(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
) -> dg.MaterializeResult:
    """Where each measured block's loads and stores land under the harness model
    its measurements were taken with (tables ``block_harness``, ``block_accesses``):
    BHive's harness run on a CPU emulator for a few iterations. A block the
    emulator cannot run keeps symbolic addresses, with the reason recorded. The
    extended model's memory dependencies read them."""
    ctx = step_context(context, warehouse, engine, settings)
    out = steps.record_accesses(ctx)
    stored = store.harness_version(warehouse.path, out.harness, ctx.uarch)
    return versions.materialized(
        context,
        warehouse.path,
        stored,
        {
            "harness": out.harness,
            "blocks": out.blocks,
            "new": out.new,
            "emulated": out.emulated,
            "fallbacks": markdown(
                pl.DataFrame({"reason": list(out.fallbacks), "blocks": list(out.fallbacks.values())})
            ),
            "ms_per_block": round(out.ms_per_block, 3),
            **row_count(warehouse, "block_accesses"),
        },
    )


@asset(
    GROUP,
    deps=["splits", block_accesses],
    partitions=UARCHS,
    kinds={"duckdb"},
    automation=FOLLOWS_UPSTREAM,
    checks=[
        blocking_check(
            "engine_exactness",
            "default_params",
            "The engine equals the llvm-mca binary on a sample of measured blocks (default table)",
            UARCHS,
        )
    ],
)
def default_params(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
):
    """LLVM's own table for the partition's µarch: every opcode, plus the variant
    resolutions used by the measured blocks (tables ``param_tables``/``param_values``).
    Its data version changes with the µarch's measurements, and only then does
    that µarch's tuning re-run."""
    ctx = step_context(context, warehouse, engine, settings)
    out = steps.default_params(ctx)
    yield versions.materialized(
        context,
        warehouse.path,
        out.data_version,
        {
            "table_id": out.table_id,
            "model": out.model,
            "model_chosen_by": out.model_chosen_by,
            "rows": out.rows,
            "measured": out.measured,
        },
    )
    yield check_result("engine_exactness", exactness(warehouse.path, ctx.engine))


@asset(GROUP, deps=[default_params], kinds={"duckdb"}, partitions=UARCHS, automation=FOLLOWS_UPSTREAM_DATA)
def block_features(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
) -> dg.MaterializeResult:
    """Hardware features of each measured block (table ``block_features``): instruction
    and µop counts, registers read and written (from LLVM's instruction descriptions),
    loads, stores, store→load memory dependencies, the critical and loop-carried
    dependency chains, port pressure and dispatch load under the default table,
    and the bottleneck they point to. Errors are sliced by it in ``evaluation``."""
    ctx = step_context(context, warehouse, engine, settings)
    out = steps.block_features(ctx)
    stored = store.uarch_version(warehouse.path, "block_features", ctx.uarch)
    return versions.materialized(
        context,
        warehouse.path,
        stored,
        {
            "table_id": out.table_id,
            "blocks": out.blocks,
            "new": out.new,
            "by_bottleneck": markdown(out.by_bottleneck),
            **row_count(warehouse, "block_features"),
        },
    )


@asset(GROUP, deps=[default_params], partitions=UARCHS, kinds={"duckdb"})  # re-run nightly by the re-tune schedule
def sampled_tables(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
) -> dg.MaterializeResult:
    """Parameter tables sampled from ``(preset, seed)``: DiffTune's uniform preset
    and one that perturbs the defaults. Only their ids are stored; their values
    are regenerated from preset and seed. Its data version names the tables and
    the train blocks they are simulated on."""
    out = steps.sampled_tables(step_context(context, warehouse, engine, settings))
    return versions.materialized(context, warehouse.path, out.data_version, asdict(out))


@asset(GROUP, deps=[sampled_tables], partitions=UARCH_SHARDS, kinds={"duckdb", "ray"}, automation=FOLLOWS_UPSTREAM_DATA)
def simulations(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    engine: EngineResource,
    settings: DiffTuneSettings,
    compute: Compute,
) -> dg.MaterializeResult:
    """(train block, sampled table) pairs through the engine, on this process's
    threads or on Ray workers (resource ``compute``), each chunk a Parquet file
    written where it was simulated and recorded in ``simulation_chunks`` (read as
    the view ``simulations``). A shard skips pairs already recorded: an
    interrupted run resumes without repeating or duplicating work."""
    ctx = step_context(context, warehouse, engine, settings, compute)
    damaged: list[str] = []
    out = steps.simulate_shard(
        ctx, shard_index(context), log=lambda line: (damaged.append(line), context.log.warning(line))
    )
    return versions.materialized(
        context,
        warehouse.path,
        out.data_version,
        {
            **asdict(out),
            **({"warning": "; ".join(damaged)} if damaged else {}),
            "compute": compute.describe(),
            "dagster/row_count": simulations_store.simulated_rows(warehouse.path, ctx.uarch),
        },
    )


@asset(
    GROUP,
    deps=[simulations],
    partitions=UARCHS,
    kinds={"pytorch"},
    automation=FOLLOWS_UPSTREAM_DATA,
    checks=[
        blocking_check("surrogate_fidelity", "surrogate", "Held-out MAPE against the engine within the limit", UARCHS)
    ],
)
def surrogate(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
):
    """The surrogate trained on the simulations — structured (analytic bounds with a
    learned correction, the default) or DiffTune's Ithemal-style LSTM — as a
    checkpoint under ``warehouse/models/`` and a row in ``surrogate_runs``, with
    its fidelity against the engine on held-out blocks."""
    ctx = step_context(context, warehouse, engine, settings)
    out = steps.train_surrogate(ctx, log=context.log.info)
    yield versions.materialized(
        context,
        warehouse.path,
        out.run_id,
        {
            "run_id": out.run_id,
            "model": out.model,
            "checkpoint": dg.MetadataValue.path(out.checkpoint),
            "heldout_mape_pct": round(100 * out.heldout_mape, 2),
            "heldout_kendall_tau": None if out.heldout_kendall_tau is None else round(out.heldout_kendall_tau, 3),
            "train_seconds": round(out.train_seconds, 1),
            "device": out.device or "reused: not trained in this run",
            "n_train": out.n_train,
            "reused": out.reused,
        },
    )
    yield check_result(
        "surrogate_fidelity", quality.surrogate_fidelity(out.heldout_mape, ctx.settings.max_surrogate_heldout_mape)
    )


@asset(
    GROUP,
    deps=[surrogate, default_params],
    partitions=UARCHS,
    kinds={"pytorch", "duckdb", "ray"},
    automation=FOLLOWS_UPSTREAM_DATA,
    checks=[
        blocking_check(
            "no_worse_than_default", "learned_params", "Engine MAPE on val of the learned table ≤ the default's", UARCHS
        )
    ],
)
def learned_params(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    engine: EngineResource,
    settings: DiffTuneSettings,
    compute: Compute,
):
    """The table learned against the train measurements by the configured tuner:
    through the frozen surrogate (DiffTune), by direct search on the engine (its
    candidates on this process's threads or on Ray workers), or both combined (the
    default); selected on val with the real engine."""
    out = steps.learn(step_context(context, warehouse, engine, settings, compute), log=context.log.info)
    meta = {"table_id": out.table_id, "reused": out.reused}
    if not out.reused:
        meta["val_mape_by_step"] = markdown(pl.DataFrame(out.history))
        meta["stages"] = markdown(pl.DataFrame(out.stages))  # what each tuner gained on val, and cost
        meta["changed_rows"] = out.changed_rows
    yield versions.materialized(context, warehouse.path, out.table_id, meta)
    yield check_result(
        "no_worse_than_default", quality.no_worse_than_default(out.default_val_mape, out.learned_val_mape)
    )


@asset(
    GROUP,
    deps=[learned_params, default_params, block_features],
    partitions=UARCHS,
    kinds={"duckdb"},
    automation=FOLLOWS_UPSTREAM_DATA,
)
def evaluation(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
) -> dg.MaterializeResult:
    """llvm-mca as shipped, LLVM's table under the chosen model and the learned
    table through the real engine on val and test, overall and per slice
    (tables ``evaluations``, ``predictions``, ``comparisons``, ``block_slices``);
    the slices the learned table makes worse by more than noise."""
    ctx = step_context(context, warehouse, engine, settings)
    out = steps.evaluate_latest(ctx)
    table = out.comparison
    test = table.filter(pl.col("split") == "test")
    other = out.by_measure.filter(pl.col("measure") != out.measure)
    share = out.test_worse_share
    meta = {
        "model": out.model,
        "measure": out.measure,  # what the figures score: steady (BHive's quantity) or total
        **{f"{name.replace('-', '_')}_table": table_id for name, table_id in out.tables.items()},
        **split_test_figures(test.filter(pl.col("slice") == "all")),
        # the same tables scored by the other measure
        **{
            f"{name.replace('-', '_')}_test_mape_pct_other_measure": round(100 * mape, 2)
            for name, mape in other.select("table", "mape").iter_rows()
            if mape is not None
        },
        # test blocks the learned table predicts more than 20 points worse than the default
        "test_blocks_worse_by_20_points_pct": None if share is None else round(100 * share, 2),
        "slices_worse_than_default": worse_summary(table),
        "by_slice": markdown(
            table.with_columns(pl.col("^.*_mape$") * 100).rename(
                {c: c + "_pct" for c in table.columns if c.endswith("_mape")}
            )
        ),
        "top_changed_parameters": markdown(out.changed),
        "figures_reused": out.figures_reused,  # nothing redrawn when nothing changed
        **row_count(warehouse, "evaluations"),
    }
    if out.scatter is not None:
        png, path = out.scatter
        meta["predicted_vs_measured"] = dg.MetadataValue.md(markdown_image(png, "predicted vs measured"))
        meta["plot_file"] = dg.MetadataValue.path(str(path))
    for e in out.explained:
        meta[f"why_{e['case'].replace(' ', '_')}"] = explained(e)
    stored = store.uarch_version(warehouse.path, "evaluation", ctx.uarch)
    return versions.materialized(context, warehouse.path, stored, meta)

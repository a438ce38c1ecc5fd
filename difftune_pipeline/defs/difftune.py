"""DiffTune assets: default table, hardware features, sampled tables,
simulations (sharded), surrogate, learned parameters, evaluation. Each calls
one idempotent stage of ``difftune_pipeline.steps`` and translates its result;
materialising again with nothing changed finds the stored result and does no work."""

import dagster as dg
import polars as pl

from difftune_pipeline import config, quality, steps
from difftune_pipeline.defs.automation import FOLLOWS_UPSTREAM
from difftune_pipeline.defs.ingest import WRITER_POOL
from difftune_pipeline.defs.metadata import blocking_check, check_result, explained, markdown, row_count
from difftune_pipeline.defs.resources import DiffTuneSettings, EngineResource, Warehouse
from difftune_pipeline.reporting.plots import markdown_image
from difftune_pipeline.steps.checks import engine_exactness as exactness
from difftune_pipeline.steps.context import CODE_VERSIONS

GROUP = "difftune"
SHARDS = dg.StaticPartitionsDefinition([f"shard-{i}" for i in range(config.Settings().shards)])


def _ctx(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> steps.StepContext:
    chosen = settings.get()
    if chosen.shards != len(SHARDS.get_partition_keys()):
        raise dg.Failure(
            f"shards = {chosen.shards}, but the simulations asset has {len(SHARDS.get_partition_keys())} "
            "partitions: the shard count is fixed by the partitions"
        )
    return steps.StepContext(warehouse.path, engine.get(), chosen)


@dg.asset(
    group_name=GROUP,
    deps=["splits"],
    pool=WRITER_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSIONS["default_params"],
    automation_condition=FOLLOWS_UPSTREAM,
)
def default_params(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """LLVM's own table for the configured -mcpu: every opcode, plus the variant
    resolutions used by the measured blocks (tables ``param_tables``/``param_values``)."""
    out = steps.default_params(_ctx(warehouse, engine, settings))
    return dg.MaterializeResult(
        metadata={"table_id": out["table_id"], "rows": out["rows"]}, data_version=dg.DataVersion(out["table_id"])
    )


@dg.asset(
    group_name=GROUP,
    deps=[default_params],
    pool=WRITER_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSIONS["features"],
    automation_condition=FOLLOWS_UPSTREAM,
)
def block_features(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Hardware features of each measured block (table ``block_features``): instruction
    and µop counts, registers read and written (from LLVM's instruction descriptions),
    loads, stores, store→load memory dependencies, the critical and loop-carried
    dependency chains, port pressure and dispatch load under the default table,
    and the bottleneck they point to. Errors are sliced by it in ``evaluation``."""
    out = steps.block_features(_ctx(warehouse, engine, settings))
    return dg.MaterializeResult(
        metadata={
            "table_id": out["table_id"],
            "blocks": out["blocks"],
            "new": out["new"],
            "by_bottleneck": markdown(out["by_bottleneck"]),
            **row_count(warehouse, "block_features"),
        }
    )


@dg.asset(
    group_name=GROUP,
    deps=[default_params],
    pool=WRITER_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSIONS["sampled_tables"],
)  # re-run nightly by the re-tune schedule
def sampled_tables(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Parameter tables sampled from ``(preset, seed)``: DiffTune's uniform preset
    and one that perturbs the defaults. Only their ids are stored; their values
    are regenerated from preset and seed."""
    out = steps.sampled_tables(_ctx(warehouse, engine, settings))
    return dg.MaterializeResult(metadata=out, data_version=dg.DataVersion(f"{out['space_id']}-{out['tables']}"))


@dg.asset(
    group_name=GROUP,
    deps=[sampled_tables],
    partitions_def=SHARDS,
    pool=WRITER_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSIONS["simulations"],
    automation_condition=FOLLOWS_UPSTREAM,
)
def simulations(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
) -> dg.MaterializeResult:
    """(train block, sampled table) pairs through the engine (table ``simulations``).
    A shard skips pairs already stored: an interrupted run resumes without
    repeating or duplicating work."""
    shard = SHARDS.get_partition_keys().index(context.partition_key)
    out = steps.simulate_shard(_ctx(warehouse, engine, settings), shard)
    return dg.MaterializeResult(metadata={**out, **row_count(warehouse, "simulations")})


@dg.asset(
    group_name=GROUP,
    deps=[simulations],
    pool=WRITER_POOL,
    kinds={"pytorch"},
    code_version=CODE_VERSIONS["surrogate"],
    automation_condition=FOLLOWS_UPSTREAM,
    check_specs=[
        blocking_check("surrogate_fidelity", "surrogate", "Held-out MAPE against the engine within the limit")
    ],
)
def surrogate(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
):
    """The surrogate trained on the simulations — structured (analytic bounds with a
    learned correction, the default) or DiffTune's Ithemal-style LSTM — as a
    checkpoint under ``warehouse/models/`` and a row in ``surrogate_runs``, with
    its fidelity against the engine on held-out blocks."""
    ctx = _ctx(warehouse, engine, settings)
    out = steps.train_surrogate(ctx, log=context.log.info)
    yield dg.MaterializeResult(
        metadata={
            "run_id": out["run_id"],
            "model": out["model"],
            "checkpoint": dg.MetadataValue.path(out["checkpoint"]),
            "heldout_mape_pct": round(100 * out["heldout_mape"], 2),
            "heldout_kendall_tau": None if out["heldout_kendall_tau"] is None else round(out["heldout_kendall_tau"], 3),
            "train_seconds": round(out["train_seconds"], 1),
            "n_train": out["n_train"],
            "reused": out["reused"],
        },
        data_version=dg.DataVersion(out["run_id"]),
    )
    yield check_result(
        "surrogate_fidelity", quality.surrogate_fidelity(out["heldout_mape"], ctx.settings.max_surrogate_heldout_mape)
    )


@dg.asset(
    group_name=GROUP,
    deps=[surrogate, "splits"],
    pool=WRITER_POOL,
    kinds={"pytorch", "duckdb"},
    code_version=CODE_VERSIONS["learned_params"],
    automation_condition=FOLLOWS_UPSTREAM,
    check_specs=[
        blocking_check(
            "no_worse_than_default", "learned_params", "Engine MAPE on val of the learned table ≤ the default's"
        )
    ],
)
def learned_params(
    context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings
):
    """The table learned against the train measurements by the configured tuner:
    through the frozen surrogate (DiffTune), by direct search on the engine, or
    both combined (the default); selected on val with the real engine."""
    out = steps.learn(_ctx(warehouse, engine, settings), log=context.log.info)
    meta = {"table_id": out["table_id"], "reused": out["reused"]}
    if not out["reused"]:
        meta["val_mape_by_step"] = markdown(pl.DataFrame(out["history"]))
        meta["changed_rows"] = out["changed_rows"]
    yield dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(out["table_id"]))
    yield check_result(
        "no_worse_than_default", quality.no_worse_than_default(out["default_val_mape"], out["learned_val_mape"])
    )


@dg.asset_check(
    asset=default_params,
    blocking=True,
    description="The engine equals the llvm-mca binary on a sample of measured blocks (default table)",
)
def engine_exactness(warehouse: Warehouse, engine: EngineResource) -> dg.AssetCheckResult:
    return check_result("engine_exactness", exactness(warehouse.path, engine.get()))


@dg.asset(
    group_name=GROUP,
    deps=[learned_params, default_params, block_features],
    pool=WRITER_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSIONS["evaluation"],
    automation_condition=FOLLOWS_UPSTREAM,
)
def evaluation(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Default and learned tables through the real engine on val and test,
    overall and per slice (tables ``evaluations`` and ``predictions``)."""
    out = steps.evaluate_latest(_ctx(warehouse, engine, settings))
    table = out["comparison"]
    test = table.filter(pl.col("split") == "test")
    worse = test.filter(pl.col("worse"))["slice"].to_list()
    meta = {
        "default_table": out["default_id"],
        "learned_table": out["learned_id"],
        **_test_overall(test.filter(pl.col("slice") == "all")),
        "slices_worse_than_default": ", ".join(worse) if worse else "none",
        "by_slice": markdown(
            table.with_columns(pl.col("^.*_mape$") * 100).rename(
                {"default_mape": "default_mape_pct", "learned_mape": "learned_mape_pct"}
            )
        ),
        "top_changed_parameters": markdown(out["changed"]),
        **row_count(warehouse, "evaluations"),
    }
    if out["scatter"] is not None:
        png, path = out["scatter"]
        meta["predicted_vs_measured"] = dg.MetadataValue.md(markdown_image(png, "predicted vs measured"))
        meta["plot_file"] = dg.MetadataValue.path(str(path))
    for e in out["explained"]:
        meta[f"why_{e['case'].replace(' ', '_')}"] = explained(e)
    return dg.MaterializeResult(metadata=meta)


def _test_overall(overall: pl.DataFrame) -> dict:
    """The test split's overall MAPE (%) and Kendall tau of both tables (None before any block is evaluated)."""
    row = overall.row(0, named=True) if overall.height else {}
    figure = lambda col, scale, digits: None if row.get(col) is None else round(scale * row[col], digits)  # noqa: E731
    return {
        "test_default_mape_pct": figure("default_mape", 100, 2),
        "test_learned_mape_pct": figure("learned_mape", 100, 2),
        "test_default_kendall_tau": figure("default_tau", 1, 3),
        "test_learned_kendall_tau": figure("learned_tau", 1, 3),
    }

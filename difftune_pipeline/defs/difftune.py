"""DiffTune assets: default table, sampled tables, simulations (sharded),
surrogate, learned parameters, evaluation. Each calls one idempotent stage of
``difftune_pipeline.pipeline``; materialising again with nothing changed finds
the stored result and does no work."""


from pathlib import Path

import dagster as dg
import polars as pl

from difftune_pipeline import plots, quality, store
from difftune_pipeline.defs.automation import FOLLOWS_UPSTREAM
from difftune_pipeline.defs.ingest import WRITER_POOL
from difftune_pipeline.defs.metadata import markdown, row_count
from difftune_pipeline.defs.resources import DiffTuneSettings, EngineResource, Warehouse
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.pipeline import CODE_VERSIONS, Stage, changed_parameters, compare, predicted_vs_measured

GROUP = "difftune"
SHARDS = dg.StaticPartitionsDefinition([f"shard-{i}" for i in range(4)])


def _stage(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> Stage:
    return Stage(warehouse.path, engine.get(), settings.to_settings(len(SHARDS.get_partition_keys())))


@dg.asset(group_name=GROUP, deps=["splits"], pool=WRITER_POOL, kinds={"duckdb"},
          code_version=CODE_VERSIONS["default_params"], automation_condition=FOLLOWS_UPSTREAM)
def default_params(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """LLVM's own table for the configured -mcpu: every opcode, plus the variant
    resolutions used by the measured blocks (tables ``param_tables``/``param_values``)."""
    out = _stage(warehouse, engine, settings).default_params()
    return dg.MaterializeResult(metadata={"table_id": out["table_id"], "rows": out["rows"]},
                                data_version=dg.DataVersion(out["table_id"]))


@dg.asset(group_name=GROUP, deps=[default_params], pool=WRITER_POOL, kinds={"duckdb"},
          code_version=CODE_VERSIONS["features"], automation_condition=FOLLOWS_UPSTREAM)
def block_features(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Hardware features of each measured block (table ``block_features``): instruction
    and µop counts, registers read and written (from LLVM's instruction descriptions),
    loads, stores, store→load memory dependencies, the critical and loop-carried
    dependency chains, port pressure and dispatch load under the default table,
    and the bottleneck they point to. Errors are sliced by it in ``evaluation``."""
    out = _stage(warehouse, engine, settings).features()
    return dg.MaterializeResult(metadata={"table_id": out["table_id"], "blocks": out["blocks"], "new": out["new"],
                                          "by_bottleneck": markdown(out["by_bottleneck"]),
                                          **row_count(warehouse, "block_features")})


@dg.asset(group_name=GROUP, deps=[default_params], pool=WRITER_POOL, kinds={"duckdb"},
          code_version=CODE_VERSIONS["sampled_tables"])  # re-run nightly by the re-tune schedule
def sampled_tables(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Parameter tables sampled from ``(preset, seed)``: DiffTune's uniform preset
    and one that perturbs the defaults. Only their ids are stored; their values
    are regenerated from preset and seed."""
    out = _stage(warehouse, engine, settings).sampled_tables()
    return dg.MaterializeResult(metadata=out, data_version=dg.DataVersion(f"{out['space_id']}-{out['tables']}"))


@dg.asset(group_name=GROUP, deps=[sampled_tables], partitions_def=SHARDS, pool=WRITER_POOL, kinds={"duckdb"},
          code_version=CODE_VERSIONS["simulations"], automation_condition=FOLLOWS_UPSTREAM)
def simulations(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource,
                settings: DiffTuneSettings) -> dg.MaterializeResult:
    """(train block, sampled table) pairs through the engine (table ``simulations``).
    A shard skips pairs already stored: an interrupted run resumes without
    repeating or duplicating work."""
    shard = SHARDS.get_partition_keys().index(context.partition_key)
    out = _stage(warehouse, engine, settings).simulate_shard(shard)
    return dg.MaterializeResult(metadata={**out, **row_count(warehouse, "simulations")})


@dg.asset(group_name=GROUP, deps=[simulations], pool=WRITER_POOL, kinds={"pytorch"},
          code_version=CODE_VERSIONS["surrogate"], automation_condition=FOLLOWS_UPSTREAM,
          check_specs=[dg.AssetCheckSpec("surrogate_fidelity", asset="surrogate", blocking=True,
                                         description="Held-out MAPE against the engine within the limit")])
def surrogate(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource,
              settings: DiffTuneSettings):
    """The surrogate trained on the simulations — structured (analytic bounds with a
    learned correction, the default) or DiffTune's Ithemal-style LSTM — as a
    checkpoint under ``warehouse/models/`` and a row in ``surrogate_runs``, with
    its fidelity against the engine on held-out blocks."""
    out = _stage(warehouse, engine, settings).train_surrogate(log=context.log.info)
    yield dg.MaterializeResult(
        metadata={"run_id": out["run_id"], "model": out["model"], "checkpoint": dg.MetadataValue.path(out["checkpoint"]),
                  "heldout_mape_pct": round(100 * out["heldout_mape"], 2),
                  "heldout_kendall_tau": round(out["heldout_kendall_tau"], 3),
                  "train_seconds": round(out["train_seconds"], 1), "n_train": out["n_train"],
                  "reused": out["reused"]},
        data_version=dg.DataVersion(out["run_id"]))
    yield _check_result("surrogate_fidelity",
                        quality.surrogate_fidelity(out["heldout_mape"], settings.surrogate_max_heldout_mape))


@dg.asset(group_name=GROUP, deps=[surrogate, "splits"], pool=WRITER_POOL, kinds={"pytorch", "duckdb"},
          code_version=CODE_VERSIONS["learned_params"], automation_condition=FOLLOWS_UPSTREAM,
          check_specs=[dg.AssetCheckSpec("no_worse_than_default", asset="learned_params", blocking=True,
                                         description="Engine MAPE on val of the learned table ≤ the default's")])
def learned_params(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource,
                   settings: DiffTuneSettings):
    """The table learned against the train measurements by the configured tuner:
    through the frozen surrogate (DiffTune), by direct search on the engine, or
    both combined (the default); selected on val with the real engine."""
    stage = _stage(warehouse, engine, settings)
    out = stage.learn(log=context.log.info)
    meta = {"table_id": out["table_id"], "reused": out["reused"]}
    if not out["reused"]:
        meta["val_mape_by_step"] = markdown(pl.DataFrame(out["history"]))
        meta["changed_rows"] = out["changed_rows"]
    yield dg.MaterializeResult(metadata=meta, data_version=dg.DataVersion(out["table_id"]))
    val_frame, val_blocks = stage.blocks("val")
    default_mape = stage.score(stage.default_table_id()[1], val_frame, val_blocks)[0]
    learned_mape = stage.score(store.load_table(out["table_id"], warehouse.path), val_frame, val_blocks)[0]
    yield _check_result("no_worse_than_default", quality.no_worse_than_default(default_mape, learned_mape))


@dg.asset_check(asset=default_params, blocking=True, description="The engine equals the llvm-mca binary on a "
                "sample of measured blocks (default table)")
def engine_exactness(warehouse: Warehouse, engine: EngineResource) -> dg.AssetCheckResult:
    sample = warehouse.query("SELECT DISTINCT b.block_id, b.hex FROM blocks b JOIN measurements m USING (block_id) "
                             "WHERE b.status = 'ok' AND m.uarch = ? ORDER BY hash(b.block_id) LIMIT 40", [engine.mcpu])
    verdict = quality.engine_exactness(engine.get(), sample["hex"].to_list(),
                                       lambda blocks: llvm_mca_many(blocks, engine.mcpu))
    return dg.AssetCheckResult(passed=verdict.passed, description=verdict.description, metadata=verdict.metadata)


def _check_result(name: str, verdict: quality.Verdict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=name, passed=verdict.passed, description=verdict.description,
                               metadata=verdict.metadata)


@dg.asset(group_name=GROUP, deps=[learned_params, default_params, block_features], pool=WRITER_POOL,
          kinds={"duckdb"}, code_version=CODE_VERSIONS["evaluation"], automation_condition=FOLLOWS_UPSTREAM)
def evaluation(warehouse: Warehouse, engine: EngineResource, settings: DiffTuneSettings) -> dg.MaterializeResult:
    """Default and learned tables through the real engine on val and test,
    overall and per slice (tables ``evaluations`` and ``predictions``)."""
    stage = _stage(warehouse, engine, settings)
    default_id, default = stage.default_table_id()
    learned_id = stage.latest_learned()
    table = compare(stage.evaluate([default_id, learned_id]), default_id, learned_id)
    test = table.filter(pl.col("split") == "test")
    overall = test.filter(pl.col("slice") == "all")
    worse = test.filter(pl.col("worse"))["slice"].to_list()
    meta = {
        "default_table": default_id, "learned_table": learned_id,
        "test_default_mape_pct": round(100 * overall["default_mape"][0], 2) if overall.height else None,
        "test_learned_mape_pct": round(100 * overall["learned_mape"][0], 2) if overall.height else None,
        "test_default_kendall_tau": round(overall["default_tau"][0], 3) if overall.height else None,
        "test_learned_kendall_tau": round(overall["learned_tau"][0], 3) if overall.height else None,
        "slices_worse_than_default": ", ".join(worse) if worse else "none",
        "by_slice": markdown(table.with_columns(pl.col("^.*_mape$") * 100).rename(
            {"default_mape": "default_mape_pct", "learned_mape": "learned_mape_pct"})),
        "top_changed_parameters": markdown(changed_parameters(default, store.load_table(learned_id, warehouse.path))),
        **row_count(warehouse, "evaluations"),
    }
    scatter = predicted_vs_measured(warehouse.path, engine.mcpu, {"default": default_id, "learned": learned_id})
    if scatter.height:
        png = plots.predicted_vs_measured(scatter, f"-mcpu={engine.mcpu}, test blocks")
        path = Path(warehouse.path).parent / "reports" / f"predicted_vs_measured-{engine.mcpu}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        meta["predicted_vs_measured"] = dg.MetadataValue.md(plots.markdown_image(png, "predicted vs measured"))
        meta["plot_file"] = dg.MetadataValue.path(str(path))
    return dg.MaterializeResult(metadata=meta)

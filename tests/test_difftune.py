"""DiffTune stages end to end on the sample, idempotence, and resumable simulations."""

import dagster as dg
import pytest
from typer.testing import CliRunner

from conftest import SAMPLE
from difftune_pipeline import ingest, simulations, store
from difftune_pipeline.cli import app
from difftune_pipeline.engine import Engine
from difftune_pipeline.pipeline import Settings, Stage
from difftune_pipeline.search import SearchConfig
from difftune_pipeline.structured import StructuredConfig
from difftune_pipeline.surrogate import SurrogateConfig
from difftune_pipeline.tune import TuneConfig

TINY = Settings(tables_per_preset=2, blocks_per_table=150, shards=2,
                surrogate=SurrogateConfig(epochs=1), structured=StructuredConfig(seconds=20, max_epochs=4),
                tune=TuneConfig(steps=6, validate_every=3), search=SearchConfig(budget=3000, rounds=1))


@pytest.fixture
def stage(haswell, warehouse):
    ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", warehouse, haswell)
    ingest.assign_splits(warehouse)
    return Stage(str(warehouse), haswell, TINY)


def _count(db, table):
    return store.query(f"SELECT count(*) FROM {table}", db).item()


def test_stages_end_to_end_and_again_without_work(stage, warehouse):
    stage.default_params()
    info = stage.sampled_tables()
    assert info["tables"] == 4 and info["rows"] > 100
    done = [stage.simulate_shard(s) for s in range(2)]
    assert sum(d["simulated"] for d in done) == 4 * 150
    run = stage.train_surrogate(log=lambda *_: None)
    assert run["model"] == "structured" and 0 < run["heldout_mape"] < 0.25 and not run["reused"]
    learned = stage.learn(log=lambda *_: None)
    default_id, default = stage.default_table_id()
    evals = stage.evaluate([default_id, learned["table_id"]])
    assert set(evals["split"]) == {"val", "test"}
    assert {"all", "len:1-4", "mem:memory", "mem:register"} <= set(evals["slice"])
    val = evals.filter((evals["split"] == "val") & (evals["slice"] == "all"))
    by_table = dict(zip(val["table_id"], val["mape"]))
    assert by_table[learned["table_id"]] <= by_table[default_id] + 1e-12  # selected on val
    stage.engine.compile(store.load_table(learned["table_id"], warehouse))  # a valid table

    counts = {t: _count(warehouse, t) for t in ("param_tables", "param_values", "simulations",
                                                  "surrogate_runs", "predictions", "evaluations")}
    assert not stage.default_params()["new"]
    assert stage.sampled_tables()["new_tables"] == 0
    assert all(stage.simulate_shard(s)["simulated"] == 0 for s in range(2))
    assert stage.train_surrogate()["reused"]
    assert stage.learn()["reused"]
    stage.evaluate([default_id, learned["table_id"]])
    assert {t: _count(warehouse, t) for t in counts} == counts


def test_interrupted_simulation_resumes_without_loss_or_duplicates(stage, warehouse, monkeypatch):
    stage.sampled_tables()
    space, default, blocks = stage.space()
    tables = stage.tables(space)
    real = Engine.simulate_pairs
    calls = {"n": 0}

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("interrupted")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "simulate_pairs", failing)
    with pytest.raises(KeyboardInterrupt):
        simulations.run_shard(warehouse, stage.engine, space, default, tables, blocks, 150, "s", chunk=100)
    partial = _count(warehouse, "simulations")
    assert partial == 100
    monkeypatch.setattr(Engine, "simulate_pairs", real)
    out = simulations.run_shard(warehouse, stage.engine, space, default, tables, blocks, 150, "s", chunk=100)
    assert out == {"planned": 600, "already_done": 100, "simulated": 500}
    assert _count(warehouse, "simulations") == 600
    dupes = store.query("SELECT count(*) FROM (SELECT block_id, table_id FROM simulations GROUP BY ALL HAVING count(*) > 1)", warehouse)
    assert dupes.item() == 0


def test_materialise_the_whole_graph_with_the_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    monkeypatch.setenv("DIFFTUNE_PROFILE", "smoke")
    runner = CliRunner()
    result = runner.invoke(app, ["materialize"])
    assert result.exit_code == 0, result.output
    assert "evaluation" in result.output and "simulations [shard-3]" in result.output
    evals = store.query("SELECT DISTINCT table_id FROM evaluations", tmp_path / "w.duckdb")
    assert evals.height == 2
    with dg.DagsterInstance.get() as instance:
        mat = instance.get_latest_materialization_event(dg.AssetKey("evaluation"))
        meta = mat.asset_materialization.metadata
        assert "test_default_mape_pct" in meta and meta["predicted_vs_measured"].value.startswith("![")
        checks = {k.name: instance.event_log_storage.get_latest_asset_check_execution_by_key([k])[k].status.value
                  for k in [dg.AssetCheckKey(dg.AssetKey(a), n) for a, n in (
                      ("measurements", "measurement_sanity"), ("default_params", "engine_exactness"),
                      ("surrogate", "surrogate_fidelity"), ("learned_params", "no_worse_than_default"))]}
        assert checks == dict.fromkeys(checks, "SUCCEEDED")
    report = runner.invoke(app, ["report", "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r.html").read_text()
    assert "-mcpu=haswell" in html and "data:image/png;base64" in html and "ML workloads" in html
    moved = runner.invoke(app, ["params", "diff", "learned", "--csv"])
    assert moved.exit_code == 0 and moved.stdout.startswith("opcode,param,idx,base,value,delta")


def test_a_tuning_change_reuses_the_surrogate_and_relearns(stage):
    stage.sampled_tables()
    for s in range(2):
        stage.simulate_shard(s)
    first = stage.train_surrogate(log=lambda *_: None)
    learned = stage.learn(log=lambda *_: None)
    retuned = Stage(stage.db, stage.engine, Settings(**{**TINY.__dict__, "tune": TuneConfig(steps=3, validate_every=3)}))
    assert retuned.train_surrogate()["run_id"] == first["run_id"] and retuned.train_surrogate()["reused"]
    again = retuned.learn(log=lambda *_: None)
    assert not again["reused"] and again["table_id"] != learned["table_id"]


@pytest.mark.parametrize("model, tuner", [("ithemal", "surrogate"), ("structured", "surrogate"),
                                          ("structured", "direct"), ("structured", "combined")])
def test_each_surrogate_and_tuner_learns_a_valid_table_no_worse_on_val(stage, model, tuner):
    stage.sampled_tables()
    for s in range(2):
        stage.simulate_shard(s)
    chosen = Stage(stage.db, stage.engine, Settings(**{**TINY.__dict__, "surrogate_model": model, "tuner": tuner}))
    run = chosen.train_surrogate(log=lambda *_: None)
    assert run["model"] == model and run["heldout_mape"] < 1.0
    out = chosen.learn(log=lambda *_: None)
    learned = store.load_table(out["table_id"], stage.db)
    stage.engine.compile(learned)
    val_frame, val_blocks = chosen.blocks("val")
    _, default = chosen.default_table_id()
    assert chosen.score(learned, val_frame, val_blocks)[0] <= chosen.score(default, val_frame, val_blocks)[0] + 1e-12
    stages = {h["stage"] for h in out["history"]}
    assert stages == {"surrogate": {"surrogate"}, "direct": {"search"}, "combined": {"surrogate", "search"}}[tuner]

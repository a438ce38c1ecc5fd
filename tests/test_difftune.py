"""DiffTune steps end to end on the sample, idempotence, and resumable simulations."""

import collections
import copy
import dataclasses
import json
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import SAMPLE, clean_env, screenshots
from difftune_pipeline import steps
from difftune_pipeline.cli import app
from difftune_pipeline.config import override, settings_for
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.surrogates.base import training_device
from difftune_pipeline.warehouse import connection as store
from difftune_pipeline.warehouse import harness_records, tables

TINY = settings_for(
    "sample",
    {
        "tables_per_preset": 2,
        "blocks_per_table": 150,
        "shards": 2,
        "lstm.epochs": 1,
        "structured.epochs": 4,
        "tune.steps": 6,
        "tune.validate_every": 3,
        "search.budget": 3000,
        "search.rounds": 1,
    },
)


def _ingested(engine: Engine, warehouse: Path) -> steps.StepContext:
    ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", warehouse, engine)
    ingest.assign_splits(warehouse)
    return steps.StepContext(str(warehouse), engine, TINY)


@pytest.fixture
def fresh(haswell, warehouse) -> steps.StepContext:
    """The sample ingested and split, nothing else."""
    return _ingested(haswell, warehouse)


def _copy(template: Path, db: Path) -> None:
    """A warehouse is its file and the simulations' files beside it (recorded relative to it)."""
    shutil.copy(template, db)
    if (template.parent / "simulations").exists():
        shutil.copytree(template.parent / "simulations", db.parent / "simulations")


@pytest.fixture(scope="module")
def chosen_template(haswell, tmp_path_factory) -> Path:
    """A warehouse whose accesses are recorded and whose model default_params chose."""
    ctx = _ingested(haswell, tmp_path_factory.mktemp("chosen") / "w.duckdb")
    steps.record_accesses(ctx)
    steps.default_params(ctx)
    return Path(ctx.db)


@pytest.fixture(scope="module")
def simulated_template(haswell, chosen_template, tmp_path_factory) -> Path:
    """That warehouse with the sampled tables simulated and the structured surrogate trained."""
    db = tmp_path_factory.mktemp("simulated") / "w.duckdb"
    _copy(chosen_template, db)
    ctx = steps.StepContext(str(db), haswell, TINY)
    steps.sampled_tables(ctx)
    for s in range(2):
        steps.simulate_shard(ctx, s)
    steps.train_surrogate(ctx, log=lambda *_: None)
    return db


@pytest.fixture
def ctx(haswell, warehouse, chosen_template) -> steps.StepContext:
    """A copy of ``chosen_template``: each test changes its own warehouse."""
    _copy(chosen_template, warehouse)
    return steps.StepContext(str(warehouse), haswell, TINY)


@pytest.fixture
def simulated(haswell, warehouse, simulated_template) -> steps.StepContext:
    """A copy of ``simulated_template``."""
    _copy(simulated_template, warehouse)
    return steps.StepContext(str(warehouse), haswell, TINY)


def _count(db, table):
    return store.query(f"SELECT count(*) FROM {table}", db).item()


def test_stages_end_to_end_and_again_without_work(ctx, warehouse):
    steps.default_params(ctx)
    info = steps.sampled_tables(ctx)
    assert info.tables == 4 and info.rows > 100
    done = [steps.simulate_shard(ctx, s) for s in range(2)]
    assert sum(d.simulated for d in done) == 4 * 150
    run = steps.train_surrogate(ctx, log=lambda *_: None)
    assert run.model == "structured" and 0 < run.heldout_mape < 0.25 and not run.reused
    assert run.device == str(training_device())  # the GPU where torch sees one, else the CPU
    learned = steps.learn(ctx, log=lambda *_: None)
    default_id, default = ctx.default_table()
    assert learned.learned_val_mape <= learned.default_val_mape
    evals = steps.evaluate(ctx, [default_id, learned.table_id])
    assert set(evals["split"]) == {"val", "test"}
    assert {"all", "len:1-4", "mem:memory", "mem:register"} <= set(evals["slice"])
    val = evals.filter((evals["split"] == "val") & (evals["slice"] == "all"))
    by_table = dict(zip(val["table_id"], val["mape"]))
    assert by_table[learned.table_id] <= by_table[default_id] + 1e-12  # selected on val
    ctx.engine.compile(tables.load_table(warehouse, learned.table_id))  # a valid table

    counts = {
        t: _count(warehouse, t)
        for t in ("param_tables", "param_values", "simulations", "surrogate_runs", "predictions", "evaluations")
    }
    assert not steps.default_params(ctx).new
    assert steps.sampled_tables(ctx).new_tables == 0
    assert all(steps.simulate_shard(ctx, s).simulated == 0 for s in range(2))
    assert steps.train_surrogate(ctx).reused
    again = steps.learn(ctx)
    assert again.reused and again.learned_val_mape == learned.learned_val_mape
    steps.evaluate(ctx, [default_id, learned.table_id])
    assert {t: _count(warehouse, t) for t in counts} == counts

    # slices drawn by other code are drawn again, and every table's figures with them
    from difftune_pipeline.warehouse import writer

    with writer(warehouse) as con:
        con.execute("UPDATE block_slices SET code_version = 'older code'")
        con.execute("DELETE FROM evaluations WHERE slice LIKE 'class:%'")  # figures of a slice the older code lacked
    again = steps.evaluate(ctx, [default_id, learned.table_id])
    assert {t: _count(warehouse, t) for t in counts} == counts
    assert again.drop("evaluated_at").equals(evals.drop("evaluated_at"))
    assert set(store.query("SELECT DISTINCT code_version FROM block_slices", warehouse)["code_version"]) == {
        steps.context.CODE_VERSIONS["evaluation"]
    }


def test_accesses_are_recorded_once_and_the_model_is_chosen_on_val(fresh, warehouse):
    ctx = fresh
    out = steps.record_accesses(ctx)
    assert out.new == out.blocks == out.recorded > 1000 and out.harness == "bhive"
    assert out.emulated + sum(out.fallbacks.values()) == out.blocks
    assert all(reason.startswith("emulation failed") for reason in out.fallbacks)
    rows = _count(warehouse, "block_accesses")
    assert steps.record_accesses(ctx).new == 0 and _count(warehouse, "block_accesses") == rows  # idempotent
    aliasing = harness_records.aliasing_blocks(warehouse, "bhive")
    assert aliasing.height > 10  # BHive's harness makes many loads read what a store wrote
    _, blocks = ctx.blocks("val")
    block_id = aliasing["block_id"].filter(aliasing["block_id"].is_in(list(blocks)))[0]
    stored = store.query(
        "SELECT iteration, instr, address, bytes, is_store FROM block_accesses WHERE block_id = ? ORDER BY seq",
        warehouse,
        [block_id],
    )
    assert [tuple(r) for r in stored.iter_rows()] == blocks[block_id].accesses  # what the steps simulate with
    out = steps.default_params(ctx)
    mechanisms, harness_name, why = ctx.model()
    assert why.startswith("auto: val MAPE of the default tables")
    on_val, *optional = why.split("; ")
    scores = {name: float(value) for name, value in (x.rsplit(" ", 1) for x in on_val.split(", ")[1:])}
    candidates = {name: m for m, name in extended.candidates("haswell").items()}
    assert list(scores) == list(candidates)  # every candidate scored, simplest first
    leaves_out = extended.optional("haswell")
    chosen = next(name for name, m in candidates.items() if m == tuple(x for x in mechanisms if x not in leaves_out))
    assert scores[chosen] == min(scores.values()) and harness_name == "bhive"  # ties: printed to 4 places
    # then each mechanism extended leaves out, judged on the train and val blocks it changes: the
    # sample's 4 with a locked instruction all come closer (locked), and more of the blocks move
    # elimination changes come closer than go further; no load of these runs ahead of a store
    verdicts = [v.split(":")[0] for v in optional]
    assert verdicts == ["move_elimination on", "locked on", "memory_ordering off"], optional
    assert "locked" in mechanisms and "4 blocks changed, 4 closer, 0 further" in optional[1]
    assert out.model == ctx.default_table()[1].model
    later = steps.StepContext(ctx.db, ctx.engine, ctx.settings)  # a step after default_params, in another run
    assert later.model() == (mechanisms, "bhive", f"auto: as default_params chose ({out.table_id})")
    assert later.default_table() == ctx.default_table()


def test_the_training_device_is_chosen_and_checked(monkeypatch):
    monkeypatch.setenv("DIFFTUNE_TORCH_DEVICE", "cpu")
    assert training_device() == torch.device("cpu")
    for bad in ("gpu0", "cuda:99" if torch.cuda.is_available() else "cuda"):
        monkeypatch.setenv("DIFFTUNE_TORCH_DEVICE", bad)
        with pytest.raises(ValueError, match="cannot be used here"):
            training_device()


def test_interrupted_simulation_resumes_without_loss_or_duplicates(ctx, warehouse, monkeypatch):
    steps.sampled_tables(ctx)
    real = Engine.simulate_pairs
    calls = {"n": 0}

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("interrupted")
        return real(self, *args, **kwargs)

    one = steps.StepContext(ctx.db, ctx.engine, override(TINY, {"shards": 1}))  # every table in shard 0
    one.model()  # chosen on val (auto) before the engine starts failing
    monkeypatch.setattr(Engine, "simulate_pairs", failing)
    with pytest.raises(KeyboardInterrupt):
        steps.simulate_shard(one, 0, chunk=100)
    partial = _count(warehouse, "simulations")
    assert partial == 150  # the first table's two chunks (100 + 50 blocks), simulated in one call
    monkeypatch.setattr(Engine, "simulate_pairs", real)
    out = steps.simulate_shard(one, 0, chunk=100)
    assert (out.planned, out.already_done, out.simulated) == (600, 150, 450)
    assert _count(warehouse, "simulations") == 600
    dupes = store.query(
        "SELECT count(*) FROM (SELECT block_id, table_id FROM simulations GROUP BY ALL HAVING count(*) > 1)", warehouse
    )
    assert dupes.item() == 0


def test_a_killed_simulation_step_resumes_without_loss_or_duplicates(ctx, warehouse):
    """SIGKILL the step while it simulates: the chunks it recorded stay, the files it
    wrote but did not record are written again under the same names, nothing twice."""
    steps.sampled_tables(ctx)
    one = steps.StepContext(ctx.db, ctx.engine, override(TINY, {"shards": 1}))
    one.model()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pickle; from difftune_pipeline import steps; from difftune_pipeline.engine import Engine; "
            "steps.simulations.RECORD_EVERY = 0; "  # each chunk recorded as it finishes
            "steps.simulate_shard(steps.StepContext(sys.argv[1], Engine('haswell'), pickle.loads(bytes.fromhex("
            "sys.argv[2]))), 0, chunk=10)",
            str(warehouse),
            pickle.dumps(one.settings).hex(),
        ]
    )
    deadline = time.monotonic() + 300
    while _count(warehouse, "simulation_chunks") < 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    recorded = _count(warehouse, "simulations")
    assert 0 < recorded < 600
    out = steps.simulate_shard(one, 0, chunk=10)
    assert (out.planned, out.already_done, out.simulated) == (600, recorded, 600 - recorded)
    assert _count(warehouse, "simulations") == 600
    dupes = store.query(
        "SELECT count(*) FROM (SELECT block_id, table_id FROM simulations GROUP BY ALL HAVING count(*) > 1)", warehouse
    )
    assert dupes.item() == 0
    files = {str(p.relative_to(warehouse.parent)) for p in (warehouse.parent / "simulations").rglob("*.parquet")}
    assert files == set(store.query("SELECT file FROM simulation_chunks", warehouse)["file"])  # no orphan, no twin


def _simulate_a_shard(ctx) -> int:
    """Simulates the first shard that has tables (a table's shard follows its id), in chunks of 40."""
    return next(s for s in range(ctx.settings.shards) if steps.simulate_shard(ctx, s, chunk=40).simulated)


def test_a_chunk_file_deleted_or_truncated_is_simulated_again(ctx, warehouse):
    steps.sampled_tables(ctx)
    shard = _simulate_a_shard(ctx)
    rows = store.query("SELECT * FROM simulations ORDER BY ALL", warehouse).rows()
    files = sorted((warehouse.parent / "simulations").rglob("*.parquet"))
    files[0].unlink()
    files[1].write_bytes(files[1].read_bytes()[:100])  # a truncated file: not the size recorded
    with pytest.raises(OSError, match="2 recorded simulation chunk file.*damaged or gone, e.g. "):  # named
        store.query("SELECT count(*) FROM Simulations", warehouse)
    again = steps.simulate_shard(ctx, shard, chunk=40)
    assert again.damaged_chunks_redone == 2 and 0 < again.simulated <= 80
    assert store.query("SELECT * FROM simulations ORDER BY ALL", warehouse).rows() == rows  # the same, once each


def _flip_a_cycles_byte(path):
    """One byte flipped in the middle of the ``cycles`` column's pages: the size stays."""
    import pyarrow.parquet as pq

    column = pq.read_metadata(path).row_group(0).column(pq.read_schema(path).names.index("cycles"))
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    at = start + column.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[at] ^= 0x04
    path.write_bytes(bytes(data))


def test_a_chunk_file_altered_in_place_is_never_learned_from(ctx, warehouse):
    import pyarrow.parquet as pq

    from difftune_pipeline.warehouse import simulations as simulations_store
    from difftune_pipeline.warehouse.simulation_files import DamagedChunks

    steps.sampled_tables(ctx)
    shard = _simulate_a_shard(ctx)
    tables = store.query("SELECT DISTINCT table_id FROM simulation_chunks", warehouse)["table_id"].to_list()
    rows = store.query("SELECT * FROM simulations ORDER BY ALL", warehouse).rows()
    files = sorted((warehouse.parent / "simulations").rglob("*.parquet"))
    sizes = [pq.read_metadata(f).num_rows for f in files]
    _flip_a_cycles_byte(files[0])
    with pytest.raises(DamagedChunks, match=f"{files[0]}: its bytes are not those written"):
        store.query("SELECT sum(cycles) FROM simulations", warehouse)  # a page's checksum fails: the file named
    with pytest.raises(DamagedChunks, match="1 recorded simulation chunk file"):  # before anything learns
        simulations_store.verified(warehouse, tables)
    assert store.query("SELECT count(*) FROM simulation_chunks", warehouse).item() == len(files) - 1  # forgotten
    again = steps.simulate_shard(ctx, shard, chunk=40)
    assert again.simulated == sizes[0] and again.damaged_chunks_redone == 0
    assert store.query("SELECT * FROM simulations ORDER BY ALL", warehouse).rows() == rows
    simulations_store.verified(warehouse, tables)  # whole again

    _flip_a_cycles_byte(files[1])  # found by the shard itself too: named, forgotten, simulated again
    lines = []
    out = steps.simulate_shard(ctx, shard, chunk=40, log=lines.append)
    assert out.damaged_chunks_redone == 1 and out.simulated == sizes[1]
    assert len(lines) == 1 and str(files[1]) in lines[0] and "simulated again" in lines[0]
    assert store.query("SELECT * FROM simulations ORDER BY ALL", warehouse).rows() == rows

    from typer.testing import CliRunner

    from difftune_pipeline.cli import app

    runner, args = CliRunner(), ["verify", "--warehouse", str(warehouse)]
    whole = runner.invoke(app, args)
    assert (
        whole.exit_code == 0
        and f"{len(files)} simulation chunk files" in whole.stdout
        and ": 0 damaged" in whole.stdout
    )
    _flip_a_cycles_byte(files[2])
    for extra, recorded in ((["--check-only"], len(files)), ([], len(files) - 1)):
        found = runner.invoke(app, [*args, *extra])
        assert found.exit_code == 1 and f"damaged: {files[2]}: its bytes are not those written" in found.stderr
        assert store.query("SELECT count(*) FROM simulation_chunks", warehouse).item() == recorded


def test_a_run_leaves_the_checkout_as_it_was(smoke_run):
    """Everything `make run` writes (warehouse, simulations, models, logs, reports, instance)
    is ignored by git: in the scratch copy it ran in, and in the checkout its links lead to."""
    root, run = smoke_run
    assert (root / "warehouse" / "simulations").is_dir() and (root / "warehouse" / "logs").is_dir()
    for where, (before, after) in run.checkouts_status.items():
        assert after == before, f"{where}: {after}"


@pytest.mark.browser
def test_materialise_the_whole_graph_with_the_cli(smoke_run, tmp_path, monkeypatch):
    root, run = smoke_run  # `make run` on the smoke profile, in a checkout of its own
    # Quiet: progress and the results, not Dagster's log, which is in the file named first.
    shown = run.stderr.splitlines() + run.stdout.splitlines()
    assert len(shown) <= 40, shown
    assert " - dagster - " not in run.stderr and "STEP_SUCCESS" not in run.stderr
    assert "✓ simulations (4 partitions)" in run.stderr and "✓ evaluation" in run.stderr
    log = root / run.stderr.splitlines()[0].split("Dagster's log: ")[1].split("  ")[0]
    assert log.parent == root / "warehouse" / "logs" and "RUN_SUCCESS" in log.read_text()
    assert "Results on the test split" in run.stdout and re.search(r"haswell +2,000 .*extended", run.stdout)
    # llvm-mca, default and learned (MAPE / τ of the steady state), then the share of test blocks made worse
    assert re.search(r"steady\)\s.*\n.*\n.*(\d+\.\d% / \.\d\d.*){3} +\d+\.\d%", run.stdout), run.stdout
    assert "    .venv/bin/difftune report\n" in run.stdout and "    make ui\n" in run.stdout
    db = root / "warehouse" / "difftune.duckdb"
    monkeypatch.setenv("DAGSTER_HOME", str(root / ".dagster_home"))
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(db))
    runner = CliRunner()
    summary = json.loads(runner.invoke(app, ["results", "--json"]).stdout)
    (haswell,) = summary["uarchs"]
    ids = {haswell[t]["table_id"] for t in ("llvm_mca", "default", "learned")}
    # auto adds move elimination and locked, each where it helps
    assert haswell["model"] == "extended+move_elimination+locked" and len(ids) == 3
    assert all(0 < haswell[t]["test_mape"] < 1 for t in ("llvm_mca", "default", "learned"))
    assert haswell["llvm_mca"]["test_mape"] > haswell["default"]["test_mape"]  # llvm-mca as shipped: the worst
    assert haswell["measure"] == "steady" and 0 <= haswell["test_worse_share"] < 0.05
    spread = haswell["test_intervals"]  # bootstrap intervals around the figures, and learned less default
    assert set(spread) == {"learned", "default", "learned - default"}
    for table in ("learned", "default"):
        (low, high), (tau_low, tau_high) = spread[table]["mape"], spread[table]["kendall_tau"]
        assert low <= haswell[table]["test_mape"] <= high and tau_low <= haswell[table]["test_kendall_tau"] <= tau_high
    assert re.search(r"haswell 95%: learned \[\d+\.\d\d%, \d+\.\d\d%\] τ \[\.\d{3}, \.\d{3}\], vs default", run.stdout)
    evals = store.query("SELECT DISTINCT table_id FROM evaluations", db)
    assert evals.height == 3
    with dg.DagsterInstance.get() as instance:
        mat = instance.get_latest_materialization_event(dg.AssetKey("evaluation"))
        meta = mat.asset_materialization.metadata
        assert {"test_llvm_mca_mape_pct", "test_default_mape_pct", "test_learned_mape_pct"} <= set(meta)
        assert meta["measure"].value == "steady" and "learned_test_mape_pct_other_measure" in meta
        assert meta["predicted_vs_measured"].value.startswith("![") and not meta["figures_reused"].value
        checks = {
            k.name: instance.event_log_storage.get_latest_asset_check_execution_by_key([k])[k].status.value
            for k in [
                dg.AssetCheckKey(dg.AssetKey(a), n)
                for a, n in (
                    ("measurements", "measurement_sanity"),
                    ("default_params", "engine_exactness"),
                    ("surrogate", "surrogate_fidelity"),
                    ("learned_params", "no_worse_than_default"),
                )
            ]
        }
        assert checks == dict.fromkeys(checks, "SUCCEEDED")
        first = mat.run_id
    # Nothing changed: the second run runs no step, redraws nothing and adds nothing, and says so per asset.
    names = ("param_tables", "simulations", "surrogate_runs", "predictions", "evaluations", "comparisons")
    counts = {t: _count(db, t) for t in names}
    figures = {p: p.stat().st_mtime_ns for p in (root / "warehouse" / "reports").iterdir()}
    again = subprocess.run(
        [".venv/bin/difftune", "materialize", "-v"],
        cwd=root,
        env=clean_env(root) | {"DIFFTUNE_PROFILE": "smoke"},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert again.returncode == 0, again.stderr
    assert "STEP_START" not in again.stderr  # -v: Dagster's log on the terminal too, and there is none
    for asset in ("block_sources", "default_params", "simulations (4 partitions)", "surrogate", "evaluation"):
        assert f"= {asset}  up to date: no step ran" in again.stderr, again.stderr
    assert {t: _count(db, t) for t in names} == counts
    assert {p: p.stat().st_mtime_ns for p in (root / "warehouse" / "reports").iterdir()} == figures
    with dg.DagsterInstance.get() as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("evaluation")).run_id == first
    report = runner.invoke(app, ["report", "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r.html").read_text()
    assert "-mcpu=haswell" in html and "data:image/png;base64" in html and "ML workloads" in html
    assert "llvm-mca as shipped" in html and "llvm_mca_mape_pct" in html
    # Why: the notable blocks explained, with their timelines and port pressure, in the report ...
    assert "Why: the blocks the learned table changed most" in html
    assert html.count('alt="timeline of ') >= 2 and 'alt="port pressure of ' in html
    # ... and in the evaluation's metadata.
    whys = {k: v.value for k, v in meta.items() if k.startswith("why_")}
    assert "why_improved_most" in whys and "why_worst_remaining" in whys
    assert all("![timeline](data:image/png;base64," in v and "| table" in v for v in whys.values())
    # The report in a real browser.
    (shot,) = screenshots(tmp_path / "shots", "--report", str(tmp_path / "r.html"), "--wait-ms", "3000")
    assert shot.name == "report.png" and shot.stat().st_size > 100_000
    moved = runner.invoke(app, ["params", "diff", "learned", "--csv"])
    assert moved.exit_code == 0 and moved.stdout.startswith("opcode,param,idx,base,value,delta")


def test_a_table_learned_under_one_model_is_not_read_back_under_another(simulated):
    """The direct search has no surrogate whose id would change with the model: its
    table's id names the default table it starts from, so another model learns again."""
    direct = override(TINY, {"tuner": "direct"})
    first = steps.learn(steps.StepContext(simulated.db, simulated.engine, direct), log=lambda *_: None)
    plain = steps.StepContext(simulated.db, simulated.engine, override(direct, {"model": "llvm-mca"}))
    other = steps.learn(plain, log=lambda *_: None)
    assert not other.reused and other.table_id != first.table_id
    assert tables.load_table(simulated.db, other.table_id).model == "llvm-mca"


def test_under_llvm_mcas_own_model_the_default_table_is_llvm_mca_as_shipped(simulated):
    """Under llvm-mca's model LLVM's table is both the default and llvm-mca as shipped: the
    evaluation compares it under the one id the default step stored it under."""
    plain = steps.StepContext(simulated.db, simulated.engine, override(TINY, {"tuner": "direct", "model": "llvm-mca"}))
    default = steps.default_params(plain)
    steps.learn(plain, log=lambda *_: None)
    evaluated = steps.evaluate_latest(plain)
    assert evaluated.model == "llvm-mca"
    assert evaluated.tables["llvm-mca"] == evaluated.tables["default"] == default.table_id
    kinds = store.query("SELECT kind FROM param_tables WHERE table_id = ?", simulated.db, [default.table_id])
    assert kinds["kind"].to_list() == ["default"]


@pytest.mark.slow
def test_a_tuning_change_reuses_the_surrogate_and_relearns(simulated):
    ctx = simulated
    first = steps.train_surrogate(ctx, log=lambda *_: None)
    learned = steps.learn(ctx, log=lambda *_: None)
    retuned = steps.StepContext(ctx.db, ctx.engine, override(TINY, {"tune.steps": 3}))
    assert steps.train_surrogate(retuned).run_id == first.run_id and steps.train_surrogate(retuned).reused
    again = steps.learn(retuned, log=lambda *_: None)
    assert not again.reused and again.table_id != learned.table_id


@pytest.mark.parametrize(
    "model, tuner",
    [
        pytest.param("ithemal", "surrogate", marks=pytest.mark.slow),
        ("structured", "surrogate"),
        ("structured", "direct"),
        ("structured", "combined"),
        ("structured", "ranked"),
        pytest.param("structured", "combined+direct", marks=pytest.mark.slow),
    ],
)
def test_each_surrogate_and_tuner_learns_a_valid_table_no_worse_on_val(simulated, model, tuner):
    ctx = simulated
    again = {"search.repeats": 2} if tuner == "combined+direct" else {}  # the full profile: 4
    chosen = steps.StepContext(ctx.db, ctx.engine, override(TINY, {"surrogate_model": model, "tuner": tuner, **again}))
    run = steps.train_surrogate(chosen, log=lambda *_: None)
    assert run.model == model and run.heldout_mape < 1.0
    out = steps.learn(chosen, log=lambda *_: None)
    learned = tables.load_table(ctx.db, out.table_id)
    ctx.engine.compile(learned)
    _, default = chosen.default_table()
    assert chosen.score(learned, "val")[0] <= chosen.score(default, "val")[0] + 1e-12
    ran = {h["stage"] for h in out.history}
    assert (
        ran
        == {
            "surrogate": {"surrogate", "prune"},
            "direct": {"search", "prune"},
            "combined": {"surrogate", "search", "prune"},
            "ranked": {"surrogate", "search", "prune"},
            "combined+direct": {"surrogate", "search", "search from default", "search again", "prune"},
        }[tuner]
    )
    # per stage, what it gained on val and what it cost; the gains add up to the learned table's
    stages = out.stages
    assert {s["stage"] for s in stages} >= ran - {"search from default", "search again"}
    assert sum(s["val_gain"] for s in stages) == pytest.approx(out.default_val_mape - out.learned_val_mape)
    assert all(s["engine_simulations"] > 0 for s in stages if s["stage"] in ("surrogate", "search"))


def _gradient_problem(ctx: steps.StepContext):
    """The learned_params step's problem with its surrogate view, for the gradient tuner alone."""
    from difftune_pipeline.steps.learned_params import _surrogate_view
    from difftune_pipeline.steps.surrogate import latest_surrogate
    from difftune_pipeline.tuners import Problem

    view = _surrogate_view(ctx, latest_surrogate(ctx))
    frame, blocks = ctx.blocks("train")
    _, default = ctx.default_table()
    train = [blocks[b] for b in frame["block_id"]]
    score = lambda t: ctx.score(t, "val")[0]  # noqa: E731
    return Problem(
        engine=ctx.engine,
        blocks=train,
        measured=frame["cycles_per_100"].to_numpy(),
        default=default,
        score=score,
        surrogate=view,
        log=lambda *_: None,
    )


def test_the_anchored_gradient_trusts_the_surrogate_for_differences_only(simulated):
    """A surrogate wrong by any amount per block at the start steers the anchored
    tuning exactly as the right one does: only its differences count."""
    from difftune_pipeline.tuners.gradient import TuneConfig, tune

    problem = _gradient_problem(simulated)
    view, n = problem.surrogate, len(problem.blocks)
    bias = torch.linspace(-300.0, 900.0, n)
    config = TuneConfig(steps=12, validate_every=3, lr=0.5, refit_steps=0)

    def learned(predict):
        args = (n, view.space, problem.default, problem.measured, problem.score, config)
        return tune(predict, *args, log=lambda *_: None, simulate=problem.train_cycles)

    right, history = learned(view.predict)
    biased, _ = learned(lambda m, g, idx: view.predict(m, g, idx) + bias[idx])
    assert right.rows == biased.rows and right.globals == biased.globals
    moved = [h for h in history if "train_mape" in h]
    assert moved, "the tuning never moved a parameter"
    kept = [h["train_mape"] for h in moved if h["kept"]]
    assert kept == sorted(kept, reverse=True) and len(set(kept)) == len(kept)  # each kept round lowers train
    assert all(h["val_mape"] is None for h in moved if not h["kept"])


def test_the_gradient_moves_a_placeholder_as_far_as_a_small_value(simulated):
    """The tuning's variables are log_scale units: from a 100-cycle placeholder (Zen+'s
    microcoded rows) a round moves as far as the trust region lets it, not lr cycles."""
    from difftune_pipeline.tuners.gradient import TuneConfig, tune

    problem = _gradient_problem(simulated)
    view, n = problem.surrogate, len(problem.blocks)
    users = collections.Counter(k for b in problem.blocks for k in dict.fromkeys(b.row_keys))
    key = max(
        (k for k in view.space.keys if problem.default.rows[k]["latency"] and problem.default.rows[k]["uops"]),
        key=lambda k: (users[k], k),
    )
    slow = {**problem.default.rows[key], "latency": [100] * len(problem.default.rows[key]["latency"])}
    start = dataclasses.replace(problem.default, rows={**problem.default.rows, key: slow})
    config = TuneConfig(steps=12, validate_every=3, lr=0.5, trust=0.5, refit_steps=0)
    args = (n, view.space, start, problem.measured, problem.score, config)
    best, history = tune(view.predict, *args, log=lambda *_: None, simulate=problem.train_cycles)
    rounds = sum(1 for h in history if h.get("kept"))
    latency = best.rows[key]["latency"][0]
    # each kept round moves at most ``trust`` units; lr 0.5 cycles a step would have left it above 94
    assert 2 ** (np.log2(101) - 0.5 * rounds) - 2 <= latency <= 60


def test_the_gradient_stays_above_the_floor_pruning_applies(simulated):
    """Asked to lower every latency and µop count, the gradient stops where pruning's
    physics would raise them again: no latency or µop count below min(1, LLVM's)."""
    from difftune_pipeline.tuners.gradient import TuneConfig, tune
    from difftune_pipeline.tuners.pruning import physical

    problem = _gradient_problem(simulated)
    view, n, default = problem.surrogate, len(problem.blocks), problem.default
    config = TuneConfig(steps=12, validate_every=3, lr=0.5, trust=4.0, refit_steps=0)
    cheaper = lambda m, g, idx: m[:, :2].sum() * torch.ones(len(idx))  # noqa: E731
    # val asks the same: the table with the least latency and the fewest µops is the best
    lighter = lambda t: float(sum(sum(r["latency"]) + r["uops"] for r in t.rows.values()))  # noqa: E731
    args = (n, view.space, default, problem.measured / 100, lighter, config)
    best, history = tune(cheaper, *args, log=lambda *_: None, simulate=problem.train_cycles)
    assert any(h.get("kept") for h in history)
    lowered = [k for k in view.space.keys if best.rows[k]["latency"][:1] < default.rows[k]["latency"][:1]]
    assert lowered and physical(best, default)[1] == []


def test_rows_in_one_train_block_move_with_their_siblings(simulated):
    """Widths of one opcode that each have a single train block are tied, as the search
    ties them: the gradient gives them one value, and pruning then finds them agreeing."""
    from difftune_pipeline.engine.table import canonical_row
    from difftune_pipeline.tuners.base import sibling_groups
    from difftune_pipeline.tuners.credit import tied_rows
    from difftune_pipeline.tuners.gradient import TuneConfig, tune

    problem = _gradient_problem(simulated)
    view, default = problem.surrogate, problem.default
    groups = collections.defaultdict(list)
    for key, group in sibling_groups(view.space.keys, default, problem.engine.sched_classes).items():
        groups[group].append(key)
    users = collections.Counter(k for b in problem.blocks for k in dict.fromkeys(b.row_keys))
    siblings = max(
        (keys for keys in groups.values() if len(keys) > 1 and default.rows[keys[0]]["latency"]),
        key=lambda keys: (sum(users[k] for k in keys), keys),
    )
    other = next(k for k in view.space.keys if k not in siblings)
    one_each = [types.SimpleNamespace(row_keys=[k]) for k in siblings] + [types.SimpleNamespace(row_keys=[other])] * 2
    tied = tied_rows(view.space, dataclasses.replace(problem, blocks=one_each))
    assert tied == [[view.space.index[k] for k in siblings]]
    # the siblings start far off (100 cycles), so that the tuning moves them
    slow = {k: {**default.rows[k], "latency": [100] * len(default.rows[k]["latency"])} for k in siblings}
    start = dataclasses.replace(default, rows={**default.rows, **slow})
    on_train = lambda t: float(np.nanmean(np.abs(problem.train_cycles(t) - problem.measured) / problem.measured))  # noqa: E731
    config = TuneConfig(steps=12, validate_every=3, lr=0.5, refit_steps=0)
    args = (len(problem.blocks), view.space, start, problem.measured, on_train, config)
    best, _ = tune(view.predict, *args, log=lambda *_: None, simulate=problem.train_cycles, tied=tied)
    assert len({repr(canonical_row(best.rows[k])) for k in siblings}) == 1
    assert best.rows[siblings[0]]["latency"][0] < 100  # they moved, as one


def test_refitting_makes_the_surrogate_closer_to_the_engine_where_it_went(simulated):
    from difftune_pipeline.tuners.active_learning import fidelity, refit, visit

    problem = _gradient_problem(simulated)
    view = problem.surrogate
    worse = view.space.decode(*[a * 2 + 1 for a in view.space.encode(problem.default)], problem.default)
    visited = [visit(view.space, t, problem.train_cycles) for t in (problem.default, worse)]
    before = [fidelity(view.predict, *v) for v in visited]
    refit(view.model, view.predict, [(v, None) for v in visited], 200, 0.01, 256, np.random.default_rng(0))
    after = [fidelity(view.predict, *v) for v in visited]
    assert sum(after) < sum(before)
    assert not any(p.requires_grad for p in view.model.parameters())  # frozen again for tuning


def test_refitting_on_tables_drawn_around_a_table_teaches_the_surrogate_the_others_there(simulated):
    """Active learning: after a refit on tables drawn around LLVM's, the surrogate is
    closer to the engine at other tables drawn there, which it never saw."""
    from difftune_pipeline.tuners.active_learning import around, fidelity, refit

    problem = _gradient_problem(simulated)
    view, n = problem.surrogate, len(problem.blocks)
    draw = lambda k, seed: around(  # noqa: E731
        view.space, problem.default, problem.train_cycles, 0.5, k, n, n, np.random.default_rng(seed)
    )
    unseen = draw(3, 1)
    before = [fidelity(view.predict, *v) for v in unseen]
    refit(view.model, view.predict, [(v, None) for v in draw(6, 2)], 200, 0.01, 256, np.random.default_rng(0))
    after = [fidelity(view.predict, *v) for v in unseen]
    assert sum(after) < sum(before)


def test_refitting_on_differences_teaches_the_surrogate_the_changes_the_tuning_reads(simulated):
    """``tune.refit_on`` differences: given the table they were drawn around, the
    refit fits the engine's cycles there plus the surrogate's change, and at
    tables it never saw that prediction comes closer to the engine, on average:
    one refit's draws may move it away (of three refits here, one does)."""
    from difftune_pipeline.tuners.active_learning import around, refit, visit
    from difftune_pipeline.tuners.base import predict_batched

    problem = _gradient_problem(simulated)
    view, n = problem.surrogate, len(problem.blocks)
    at = visit(view.space, problem.default, problem.train_cycles)
    draw = lambda k, seed: around(  # noqa: E731
        view.space, problem.default, problem.train_cycles, 0.5, k, n, n, np.random.default_rng(seed)
    )
    unseen, everything = draw(8, 1), np.arange(n)

    def anchored_error() -> float:
        base = predict_batched(view.predict, at[0], at[1], everything)
        return sum(
            torch.nanmean((at[2] + predict_batched(view.predict, m, g, everything) - base - e).abs() / e).item()
            for m, g, e in unseen
        )

    before, fitted, after = anchored_error(), copy.deepcopy(view.model.state_dict()), []
    for seed in (2, 3, 4):
        view.model.load_state_dict(fitted)
        refit(view.model, view.predict, [(v, at) for v in draw(12, seed)], 200, 0.01, 256, np.random.default_rng(0))
        after.append(anchored_error())
    assert np.mean(after) < before


def test_the_tuning_records_the_tables_it_visited_and_the_surrogate_near_its_table(simulated):
    """The gradient's tables, the ones drawn around each table it confirmed (on a
    few train blocks), and the ones drawn near its result are simulations like
    the others (Parquet, read with SQL); its stage says how close the surrogate was there."""
    from difftune_pipeline.warehouse.user_query import user_query

    settings = override(TINY, {"tuner": "surrogate", "tune.around": 2, "tune.around_blocks": 40})
    chosen = steps.StepContext(simulated.db, simulated.engine, settings)
    out = steps.learn(chosen, log=lambda *_: None)
    surrogate = next(s for s in out.stages if s["stage"] == "surrogate")
    assert 0 <= surrogate["near_anchored_mape"] < surrogate["near_level_mape"] and surrogate["near_engine_change"] > 0
    n_train, n_val = (len(simulated.blocks(s)[0]) for s in ("train", "val"))
    _, visited = user_query(
        "SELECT sp.split, t.table_id, count(*) AS n FROM simulations s JOIN param_tables t USING (table_id) "
        "JOIN splits sp USING (block_id) WHERE t.kind = 'visited' GROUP BY ALL ORDER BY ALL",
        simulated.db,
    )
    sizes = [(split, n) for split, _, n in visited]
    assert sizes.count(("val", n_val)) >= 5  # the learned table and four drawn near it, on every val block
    assert ("train", n_train) in sizes  # LLVM's table and each round's, on every train block
    assert sizes.count(("train", 40)) >= 2  # two drawn around LLVM's table, on 40 train blocks each
    # and each credited part of a refused round, on the train blocks it changed (tuners.credit)
    parts = [(split, n) for split, n in sizes if (split, n) not in {("train", n_train), ("train", 40), ("val", n_val)}]
    assert all(split == "train" and 0 < n < n_train for split, n in parts)
    assert len(parts) <= sum("round_train_mape" in h for h in out.history)
    assert store.query("SELECT count(*) FROM simulation_chunks WHERE shard = 'tuning'", simulated.db).item() == len(
        sizes
    )


def test_tables_drawn_near_a_table_stay_inside_the_trust_region(simulated):
    from difftune_pipeline.tuners.fidelity import drawn_tables

    problem = _gradient_problem(simulated)
    space, trust = problem.surrogate.space, 0.5
    here, _ = space.encode(problem.default)
    drawn = [space.encode(t)[0] for t in drawn_tables(space, problem.default, trust, 3, 0.25, np.random.default_rng(0))]
    low, high = np.floor(2 ** (np.log2(1 + here) - trust) - 1), np.ceil(2 ** (np.log2(1 + here) + trust) - 1)
    for m in drawn:
        assert np.all((m >= low) & (m <= high)) and np.all(m[here == 0] == 0)
        moved = np.any(m != here, axis=1).mean()
        assert 0 < moved <= 0.4  # about a quarter of the rows


def test_the_surrogate_screens_a_row_by_its_change_in_cycles(simulated):
    """The search's screen reads the surrogate's change in the blocks' cycles: none
    for the row as it is, one per variant otherwise, and it does not know (None)
    a row outside its space, which the engine then judges alone."""
    from difftune_pipeline.tuners.screen import SurrogateScreen

    problem = _gradient_problem(simulated)
    view, default = problem.surrogate, problem.default
    screen = SurrogateScreen(view, top=1)
    key = next(k for k in view.space.keys if default.rows[k]["latency"] and default.rows[k]["latency"][0] > 0)
    slower = {**default.rows[key], "latency": [v + 20 for v in default.rows[key]["latency"]]}
    idx = np.array([b for b, block in enumerate(problem.blocks) if key in block.row_keys])
    change = screen.change(default, [{key: default.rows[key]}, {key: slower}], idx)
    assert change.shape == (2, len(idx)) and np.all(change[0] == 0) and change[1].mean() > 0
    assert screen.judged == 2
    assert screen.change(default, [{"NOT_A_ROW": slower}], idx) is None and screen.judged == 2
    # the table as the search moves it: encoded again only where its rows changed, always as a whole
    moved = dataclasses.replace(default, rows={**default.rows, key: slower})
    again = screen.change(moved, [{key: default.rows[key]}], idx)
    assert np.allclose(again, -change[1:], atol=1e-4)
    for table in (moved, default):
        assert all(np.array_equal(a, b) for a, b in zip(screen._encode(table), view.space.encode(table)))

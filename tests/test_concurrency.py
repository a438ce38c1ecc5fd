"""Runs that survive kills and readers: a killed run's pool slot is freed by the
next run, a run waiting for the pool says for what and can be interrupted, and
readers and writers of the warehouse wait for each other instead of failing."""

import os
import select
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg
import duckdb
import pytest

from conftest import ROOT
from difftune_pipeline.warehouse import connection as store

DIFFTUNE = str(ROOT / ".venv" / "bin" / "difftune")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A Dagster instance configured like the project's (pool limit 1) and a warehouse."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster_instance.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    monkeypatch.setenv("DIFFTUNE_PROFILE", "sample")
    monkeypatch.setenv("DIFFTUNE_LOCK_TIMEOUT", "120")
    return tmp_path


def _materialize(select: str) -> subprocess.Popen:
    return subprocess.Popen(
        [DIFFTUNE, "materialize", "--select", select],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _wait_for(predicate, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _line_with(stream, text: str, seconds: float = 120) -> str:
    """The first line of ``stream`` that contains ``text``; fails (not hangs) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            line = stream.readline()
            if text in line or line == "":
                return line
    raise AssertionError(f"no line with {text!r} within {seconds} s")


def _pool_holders() -> list[str]:
    with dg.DagsterInstance.get() as instance:
        return [s.run_id for s in instance.event_log_storage.get_concurrency_info("duckdb_writer").claimed_slots]


@pytest.mark.slow
def test_a_killed_run_frees_its_slot_and_a_waiting_run_can_be_interrupted(home):
    # a reader that keeps the warehouse open makes the first run wait inside its pooled step
    warehouse = home / "w.duckdb"
    store.connect(warehouse).close()
    held = duckdb.connect(str(warehouse), read_only=True)
    first = _materialize("key:measurements")
    holder = _wait_for(_pool_holders, "the first run to claim the pool slot")[0]

    second = _materialize("key:splits")
    line = _line_with(second.stderr, "waiting for pool")
    assert "waiting for pool duckdb_writer" in line and holder[:8] in line and f"pid {first.pid}" in line
    second.send_signal(signal.SIGINT)
    assert second.wait(timeout=20) != 0  # interrupted while waiting, promptly

    first.kill()  # SIGKILL: the run stays "started" and keeps its slot
    first.wait()
    held.close()
    assert _pool_holders() == [holder]

    third = _materialize("key:measurements")
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, out + err
    assert f"run {holder} was left by a killed process" in err
    assert store.query("SELECT count(*) FROM measurements", warehouse).item() > 0
    with dg.DagsterInstance.get() as instance:
        assert instance.get_run_by_id(holder).status == dg.DagsterRunStatus.FAILURE
    assert _pool_holders() == []


def _reader(warehouse, stop, report):
    """A process that queries the warehouse every 10 ms until ``stop`` exists."""
    code = f"""
import json, pathlib, time
from difftune_pipeline.warehouse import connection as store
ok, errors = 0, []
while not pathlib.Path({str(stop)!r}).exists():
    try:
        store.query("SELECT count(*) FROM batches", {str(warehouse)!r})
        ok += 1
    except Exception as exc:
        errors.append(repr(exc))
    time.sleep(0.01)
pathlib.Path({str(report)!r}).write_text(json.dumps({{"ok": ok, "errors": errors}}))
"""
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "DIFFTUNE_LOCK_TIMEOUT": "60"})


@pytest.mark.slow
def test_a_polling_reader_and_the_graph_coexist(home):
    import json

    warehouse = home / "w.duckdb"
    store.connect(warehouse).close()
    stop, report = home / "stop", home / "report.json"
    reader = _reader(warehouse, stop, report)
    try:
        run = _materialize("key:measurements or key:block_sources or key:blocks or key:splits or key:default_params")
        out, err = run.communicate(timeout=600)
    finally:
        stop.touch()
        reader.wait(timeout=60)
    assert run.returncode == 0, out + err
    polled = json.loads(report.read_text())
    assert polled["errors"] == [] and polled["ok"] > 20
    assert store.query("SELECT count(*) FROM param_tables", warehouse).item() == 1


def test_a_query_waits_for_a_writer_and_then_says_who_held_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from difftune_pipeline.cli import app

    warehouse = tmp_path / "w.duckdb"
    store.connect(warehouse).close()
    code = f"import duckdb, time; c = duckdb.connect({str(warehouse)!r}); print('open', flush=True); time.sleep(30)"
    held = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "open"
        monkeypatch.setenv("DIFFTUNE_LOCK_TIMEOUT", "0.5")
        result = CliRunner().invoke(app, ["sql", "select 1", "--warehouse", str(warehouse)])
        assert result.exit_code == 2 and result.stdout == ""
        assert f"held by process {held.pid}" in result.stderr and "Traceback" not in result.output
    finally:
        held.kill()
        held.wait()
    assert CliRunner().invoke(app, ["sql", "select 1 as a", "--csv", "--warehouse", str(warehouse)]).stdout == "a\n1\n"


def test_a_writer_waits_for_a_reader_within_the_timeout(tmp_path, monkeypatch):
    warehouse = tmp_path / "w.duckdb"
    store.connect(warehouse).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(warehouse)!r}, read_only=True); "
            "print('open', flush=True); time.sleep(1.5)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "open"
    monkeypatch.setenv("DIFFTUNE_LOCK_TIMEOUT", "0.3")
    with pytest.raises(store.WarehouseBusy, match=rf"held by process {holder.pid}.*0\.3 s"):
        store.connect(warehouse)
    monkeypatch.setenv("DIFFTUNE_LOCK_TIMEOUT", "30")
    started = time.monotonic()
    with store.writer(warehouse) as con:  # waits for the reader to go, then writes
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
    assert time.monotonic() - started < 30
    assert holder.wait() == 0
    assert store.query("SELECT a FROM t", warehouse).item() == 1
    monkeypatch.setenv("DIFFTUNE_LOCK_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="DIFFTUNE_LOCK_TIMEOUT"):
        store.connect(warehouse)


def test_a_warehouse_another_process_is_creating_is_waited_for_and_a_damaged_one_refused(tmp_path):
    """DuckDB creates the file before it writes its header: for that moment a second
    process reads it as no database (two ingests of one batch into a new warehouse
    met it). A file that young is waited for; an older one that is no database is
    refused at once, with DuckDB's words."""
    import threading

    warehouse = tmp_path / "w.duckdb"
    warehouse.write_bytes(b"")  # created, no header yet

    def finish():
        time.sleep(0.5)
        warehouse.unlink()
        duckdb.connect(str(warehouse)).close()

    creator = threading.Thread(target=finish)
    creator.start()
    started = time.monotonic()
    store.connect(warehouse).close()
    creator.join()
    assert 0.4 < time.monotonic() - started < 5
    assert store.query("SELECT max(version) FROM schema_version", warehouse).item() >= 1
    damaged = tmp_path / "damaged.duckdb"
    damaged.write_bytes(b"not a database" * 1000)
    old = time.time() - 60
    os.utime(damaged, (old, old))
    started = time.monotonic()
    with pytest.raises(duckdb.IOException, match="not a valid DuckDB database file"):
        store.connect(damaged)
    assert time.monotonic() - started < 1


def test_the_reaper_sensor_frees_a_ui_launched_run_whose_worker_died(home):
    from dagster._core.events import EngineEventData

    from difftune_pipeline.defs.recovery import dead_run_reaper

    worker = subprocess.Popen([sys.executable, "-c", "pass"])
    worker.wait()  # a run worker that is gone
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_launcher, dg.DefaultRunLauncher)
        run = instance.add_run(dg.DagsterRun(job_name="__ephemeral_asset_job__", status=dg.DagsterRunStatus.STARTED))
        instance.report_engine_event(
            f"Started process for run (pid: {worker.pid}).", run, EngineEventData.in_process(worker.pid)
        )
        instance.event_log_storage.claim_concurrency_slot("duckdb_writer", run.run_id, "simulations")
        alive = instance.add_run(dg.DagsterRun(job_name="__ephemeral_asset_job__", status=dg.DagsterRunStatus.STARTED))
        instance.report_engine_event("Started process", alive, EngineEventData.in_process(os.getppid()))
        skipped = dead_run_reaper(dg.build_sensor_context(instance=instance))
        assert run.run_id in skipped.skip_message and alive.run_id not in skipped.skip_message
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        assert _pool_holders() == []

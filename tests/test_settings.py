"""Every bad setting is refused before any work: one line on stderr naming the
variable, its value and what is accepted, exit status 2, the warehouse untouched."""

import atexit
import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from difftune_pipeline.cli import app
from difftune_pipeline.warehouse import connection as store

runner = CliRunner()
VARIABLES = (
    "DIFFTUNE_SETTINGS",
    "DIFFTUNE_PROFILE",
    "DIFFTUNE_DATA_DIR",
    "DIFFTUNE_LOCK_TIMEOUT",
    "DIFFTUNE_TORCH_DEVICE",
    "DIFFTUNE_COMPUTE",
    "DIFFTUNE_RAY_WORKERS",
    "DIFFTUNE_SEARCH_HALVING",
    "DIFFTUNE_TUNER",
    "DIFFTUNE_SIMULATIONS",
    "RAY_ADDRESS",
)


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = [
    ({"DIFFTUNE_SETTINGS": "{search.budget: 1"}, "DIFFTUNE_SETTINGS='{search.budget: 1': a JSON object"),
    ({"DIFFTUNE_SETTINGS": '{"search.budgett": 1}'}, "unknown setting 'budgett' of SearchConfig: one of"),
    ({"DIFFTUNE_SETTINGS": '{"search.budget": "lots"}'}, "setting 'budget' must be of type int"),
    ({"DIFFTUNE_SETTINGS": '{"iterations": 0}'}, "setting 'iterations' must be at least 1, got 0"),
    ({"DIFFTUNE_SETTINGS": '{"shards": -2}'}, "setting 'shards' must be at least 1, got -2"),
    ({"DIFFTUNE_PROFILE": "huge"}, "DIFFTUNE_PROFILE='huge': one of full, sample, smoke"),
    ({"DIFFTUNE_PROFILE": "full"}, "DIFFTUNE_DATA_DIR='': the full profile's data: the full profile needs"),
    ({"DIFFTUNE_PROFILE": "full", "DIFFTUNE_DATA_DIR": "/nonexistent"}, "/nonexistent holds none of ground_truth/"),
    ({"DIFFTUNE_LOCK_TIMEOUT": "abc"}, "DIFFTUNE_LOCK_TIMEOUT='abc': seconds to wait for the warehouse, a number ≥ 0"),
    ({"DIFFTUNE_LOCK_TIMEOUT": "-1"}, "DIFFTUNE_LOCK_TIMEOUT='-1': seconds to wait"),
    ({"DIFFTUNE_TORCH_DEVICE": "cuda:7"}, "DIFFTUNE_TORCH_DEVICE='cuda:7' cannot be used here"),
    (
        {"DIFFTUNE_TORCH_DEVICE": "meta"},
        "DIFFTUNE_TORCH_DEVICE='meta' cannot be used here (a meta device holds no data)",
    ),
    ({"DIFFTUNE_TORCH_DEVICE": "gpu0"}, "DIFFTUNE_TORCH_DEVICE='gpu0' cannot be used here"),
    ({"DIFFTUNE_COMPUTE": "banana"}, "DIFFTUNE_COMPUTE='banana': threads or ray"),
    ({"DIFFTUNE_RAY_WORKERS": "-3"}, "DIFFTUNE_RAY_WORKERS='-3': a number of workers, 0 for one per free CPU"),
    ({"DIFFTUNE_RAY_WORKERS": "²"}, "DIFFTUNE_RAY_WORKERS='²': a number of workers"),
    ({"DIFFTUNE_SEARCH_HALVING": "yes"}, "DIFFTUNE_SEARCH_HALVING='yes': 1 to let the search halve"),
    ({"DIFFTUNE_TUNER": "fast"}, "DIFFTUNE_TUNER='fast': unknown tuner 'fast'"),
    ({"DIFFTUNE_SIMULATIONS": "nosuch://x"}, "DIFFTUNE_SIMULATIONS='nosuch://x': a folder or a URI pyarrow opens"),
    (
        {"DIFFTUNE_SIMULATIONS": "{file}"},
        "DIFFTUNE_SIMULATIONS='{file}': {file} must be a folder this process can write: it is a file",
    ),
    (
        {"DIFFTUNE_SIMULATIONS": "/proc/x"},
        "DIFFTUNE_SIMULATIONS='/proc/x': /proc/x must be a folder this process can write",
    ),
    (
        {"DIFFTUNE_INBOX": "/proc/x/inbox"},
        "DIFFTUNE_INBOX='/proc/x/inbox': /proc/x/inbox must be a folder this process",
    ),
    (
        {"DIFFTUNE_INBOX": "{ro}/inbox"},
        "DIFFTUNE_INBOX='{ro}/inbox': {ro}/inbox must be a folder this process can write",
    ),
    ({"DIFFTUNE_QUERY_MEMORY": "lots"}, "DIFFTUNE_QUERY_MEMORY='lots': a size such as 2GB or 512MiB"),
    (
        {"DIFFTUNE_COMPUTE": "ray", "RAY_ADDRESS": "127.0.0.1:{port}"},
        "RAY_ADDRESS='127.0.0.1:{port}': no Ray cluster answered within 5 s",
    ),
    ({"DIFFTUNE_COMPUTE": "ray", "RAY_ADDRESS": "nowhere"}, "RAY_ADDRESS='nowhere': a Ray cluster's HOST:PORT"),
]


def _placed(text: str, places: dict) -> str:
    for name, value in places.items():
        text = text.replace(name, value)
    return text


@functools.cache
def _read_only_mount() -> str:
    """A read-only folder: a tmpfs mounted read-only where this machine allows it, else /sys
    (read-only in every container)."""
    folder = Path(tempfile.mkdtemp(prefix="difftune-ro-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        folder.rmdir()
        return "/sys/fs"
    atexit.register(_unmount, folder)
    return str(folder)


def _unmount(folder: Path) -> None:
    if subprocess.run(["umount", str(folder)], capture_output=True).returncode == 0:
        folder.rmdir()


@pytest.fixture
def quiet_env(tmp_path, monkeypatch):
    """No setting of the caller's, a warehouse that exists, and its bytes."""
    for var in VARIABLES:
        monkeypatch.delenv(var, raising=False)
    db = tmp_path / "w.duckdb"
    store.connect(db).close()
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(db))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return db


def _digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("env, message", CASES)
def test_a_bad_setting_is_one_line_and_exit_2_before_any_work(quiet_env, monkeypatch, env, message):
    port = _closed_port()
    places = {"{port}": str(port), "{file}": str(quiet_env), "{ro}": _read_only_mount()}
    for var, value in env.items():
        monkeypatch.setenv(var, _placed(value, places))
    message = _placed(message, places)
    before = _digest(quiet_env.parent)
    t0 = time.monotonic()
    result = runner.invoke(app, ["materialize"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert time.monotonic() - t0 < 30  # an address that never answers is given up on
    assert _digest(quiet_env.parent) == before  # nothing written: no warehouse change, no instance, no log


def test_a_selection_that_matches_nothing_lists_the_assets(quiet_env):
    before = _digest(quiet_env.parent)
    result = runner.invoke(app, ["materialize", "--select", "key:nonexistent"])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "--select 'key:nonexistent' matches no asset; the assets: " in line
    assert "evaluation" in line and "learned_params" in line and "simulations" in line
    garbled = runner.invoke(app, ["materialize", "--select", "learned_params evaluation"])
    assert garbled.exit_code == 2 and "is not an asset selection" in garbled.stderr
    assert _digest(quiet_env.parent) == before


def test_the_real_command_says_one_line(tmp_path):
    """The installed command, in a process of its own: nothing but the line reaches the terminal."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and k != "DAGSTER_HOME"}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "difftune"), "materialize"],
        env={**env, "DIFFTUNE_PROFILE": "huge", "DIFFTUNE_WAREHOUSE": str(tmp_path / "w.duckdb")},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == "error: DIFFTUNE_PROFILE='huge': one of full, sample, smoke\n"
    assert not list(tmp_path.iterdir())


def test_ray_is_reached_only_when_there_is_something_to_simulate():
    """Choosing Ray builds an engine without connecting: a run with nothing to simulate never reaches a cluster."""
    probe = (
        "import ray\n"
        "from difftune_pipeline.defs.resources import Compute\n"
        "engine = Compute(backend='ray').engine('haswell')\n"
        "print(ray.is_initialized(), engine.mcpu)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False haswell"


@pytest.mark.slow
def test_without_dagster_home_the_projects_instance_is_used(tmp_path, monkeypatch):
    """`difftune materialize` run directly, as the README shows: the project's instance, set up as make does."""
    from difftune_pipeline import ui

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "dagster_instance.yaml", project)
    monkeypatch.setattr(ui, "PROJECT", project)
    monkeypatch.setenv("DAGSTER_HOME", "")  # recorded, so that the value the command sets is undone after
    for var in (*VARIABLES, "DAGSTER_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DIFFTUNE_PROFILE", "smoke")
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    result = runner.invoke(app, ["materialize", "--select", "key:block_sources"])
    assert result.exit_code == 0, result.output
    assert "✓ block_sources" in result.stderr and "DagsterHomeNotSetError" not in result.output
    home = project / ".dagster_home"
    assert (home / "dagster.yaml").read_text() == (ROOT / "dagster_instance.yaml").read_text()
    assert os.environ["DAGSTER_HOME"] == str(home)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("block_sources")) is not None

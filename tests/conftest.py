import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from difftune_pipeline.engine import Engine, extended

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "difftune_pipeline" / "data" / "sample"
TEST_DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def haswell() -> Engine:
    return Engine("haswell")


@pytest.fixture(scope="session")
def sample_rows() -> list[tuple[str, float]]:
    with open(SAMPLE / "bhive_hsw_sample.csv") as fh:
        return [(h, float(c)) for h, c in csv.reader(fh)]


@pytest.fixture(scope="session")
def haswell_train(haswell, sample_rows):
    """The first 300 sample blocks that disassemble, and their measured cycles: a small train set."""
    rows = sample_rows[:300]
    blocks = haswell.disassemble_many([h for h, _ in rows])
    keep = [i for i, b in enumerate(blocks) if b.ok]
    return [blocks[i] for i in keep], np.array([rows[i][1] for i in keep])


@pytest.fixture
def warehouse(tmp_path) -> Path:
    return tmp_path / "w.duckdb"


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    return tmp_path


def screenshots(out: Path, *args: str, env: dict | None = None) -> list[Path]:
    """Run the browser check (bench/ui_screenshots.py) with ``args``; the PNGs it wrote."""
    assert shutil.which("chromium"), "Debian's chromium is missing: `make test` installs it (make chromium)"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ui_screenshots.py"), "--out", str(out), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return [Path(line.split(": ", 1)[1]) for line in run.stdout.splitlines() if line.endswith(".png")]


def clean_env(root: Path) -> dict:
    """The environment of a user in ``root``: none of the caller's pipeline settings, the instance of ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIFFTUNE_") and k != "DAGSTER_HOME"}
    return env | {"DAGSTER_HOME": str(root / ".dagster_home"), "COLUMNS": "100"}


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``make run`` on the smoke profile in a scratch copy of the checkout (its
    files linked, a warehouse and an instance of its own): the folder, and what
    the run printed. The whole-graph and documentation tests read it."""
    root = tmp_path_factory.mktemp("checkout")
    for entry in ROOT.iterdir():
        if entry.name not in {"warehouse", ".dagster_home", ".git", ".pytest_cache", ".gitignore"}:
            (root / entry.name).symlink_to(entry)
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")  # git reads no linked .gitignore
    (root / "warehouse").mkdir()
    shutil.copy(ROOT / "warehouse" / "README.md", root / "warehouse" / "README.md")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "checkout"]):  # to see what a run leaves
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    env = {k: v for k, v in clean_env(root).items() if k != "DAGSTER_HOME"}  # make sets the checkout's
    before = _status(ROOT)  # what the run writes through the links lands in the real checkout
    run = subprocess.run(
        ["make", "run"],
        cwd=root,
        env=env | {"DIFFTUNE_PROFILE": "smoke"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    run.checkouts_status = {"linked checkout": (before, _status(ROOT)), "scratch copy": ("", _status(root))}
    return root, run


def _status(checkout: Path) -> str:
    """``git status`` of a checkout: what is new or changed there, ignored files aside."""
    command = ["git", "status", "--porcelain", "--untracked-files=all"]
    return subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True).stdout


def pipeline(mcpu: str) -> tuple[str, ...]:
    """``extended`` less the harness's offset: the CPU's own cycles, for the tests of
    its other mechanisms and of the surrogate's bounds (the offset's own tests check
    what it takes off)."""
    return tuple(m for m in extended.for_cpu(mcpu) if m != "harness_offset")

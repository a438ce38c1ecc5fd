import csv
from pathlib import Path

import pytest

from difftune_pipeline.engine import Engine

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


@pytest.fixture
def warehouse(tmp_path) -> Path:
    return tmp_path / "w.duckdb"


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    return tmp_path

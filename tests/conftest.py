import csv
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from difftune_pipeline.engine import LLVM_MCA, Engine

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "difftune_pipeline" / "data" / "sample"
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def haswell() -> Engine:
    return Engine("haswell")


@pytest.fixture(scope="session")
def sample_rows() -> list[tuple[str, float]]:
    with open(SAMPLE / "bhive_hsw_sample.csv") as fh:
        return [(h, float(c)) for h, c in csv.reader(fh)]


def llvm_mca_cycles(asm_lines: list[str], mcpu: str, iterations: int = 100) -> int | str:
    """'Total Cycles' of the llvm-mca binary of the engine's LLVM, or its error text."""
    proc = subprocess.run(
        [str(LLVM_MCA), "-mtriple=x86_64-unknown-linux-gnu", f"-mcpu={mcpu}", f"-iterations={iterations}"],
        input="\n".join(asm_lines) + "\n", capture_output=True, text=True, timeout=120)
    for line in proc.stdout.splitlines():
        if line.startswith("Total Cycles:"):
            return int(line.split()[2])
    return "llvm-mca failed: " + proc.stderr.strip()


def llvm_mca_many(blocks_asm: list[list[str]], mcpu: str, workers: int = 2) -> list[int | str]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda a: llvm_mca_cycles(a, mcpu), blocks_asm))


@pytest.fixture
def warehouse(tmp_path) -> Path:
    return tmp_path / "w.duckdb"


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    return tmp_path

"""Shared by the benchmarks: BHive files and the llvm-mca binary as the reference."""

import csv
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from difftune_pipeline.engine import LLVM_MCA

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
GROUND_TRUTH = {"haswell": "bhive_hsw.csv", "ivybridge": "bhive_ivb.csv", "skylake": "bhive_skl.csv"}


def bhive_rows(mcpu: str, n: int | None = None) -> list[tuple[str, float]]:
    with open(DATA / "ground_truth" / GROUND_TRUTH[mcpu]) as fh:
        rows = [(h, float(c)) for h, c in csv.reader(fh)]
    return rows[:n] if n else rows


def llvm_mca_cycles(asm_lines: list[str], mcpu: str, iterations: int = 100) -> int | None:
    proc = subprocess.run(
        [str(LLVM_MCA), "-mtriple=x86_64-unknown-linux-gnu", f"-mcpu={mcpu}", f"-iterations={iterations}"],
        input="\n".join(asm_lines) + "\n", capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("Total Cycles:"):
            return int(line.split()[2])
    return None


def llvm_mca_many(blocks_asm: list[list[str]], mcpu: str, workers: int = 2) -> list[int | None]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda a: llvm_mca_cycles(a, mcpu), blocks_asm))

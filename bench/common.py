"""Shared by the benchmarks: BHive's measured files."""

import csv
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
GROUND_TRUTH = {"haswell": "bhive_hsw.csv", "ivybridge": "bhive_ivb.csv", "skylake": "bhive_skl.csv"}


def bhive_rows(mcpu: str, n: int | None = None) -> list[tuple[str, float]]:
    with open(DATA / "ground_truth" / GROUND_TRUTH[mcpu]) as fh:
        rows = [(h, float(c)) for h, c in csv.reader(fh)]
    return rows[:n] if n else rows

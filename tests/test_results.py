"""What a run reports: slices called worse only when the difference holds up,
the results summary from the warehouse alone, and a full disk that ends in one
line with the warehouse consistent and the next run completing it."""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from conftest import SAMPLE
from difftune_pipeline.cli import app
from difftune_pipeline.model.metrics import worse_slices
from difftune_pipeline.reporting.compare import compare, worse_summary
from difftune_pipeline.warehouse import connection as store

runner = CliRunner()


def _errors(rng, n: int, shift: float, noise: float, prefix: str) -> pl.DataFrame:
    base = rng.uniform(0.05, 0.3, n)
    return pl.DataFrame(
        {
            "block_id": [f"{prefix}{i:04d}" for i in range(n)],
            "base_error": base,
            "new_error": np.abs(base + shift + rng.normal(0, noise, n)),
        }
    )


def test_a_slice_is_worse_only_when_the_difference_holds_up():
    rng = np.random.default_rng(1)
    errors = pl.concat(
        [
            _errors(rng, 200, 0.10, 0.02, "worse"),  # many blocks, all worse: holds
            _errors(rng, 8, 0.50, 0.02, "few"),  # much worse, but 8 blocks: noise
            _errors(rng, 300, 0.0, 0.05, "noisy"),  # higher or lower by chance only
        ]
    )
    memberships = errors.select("block_id", pl.col("block_id").str.extract(r"^([a-z]+)").alias("slice"))
    verdicts = {r["slice"]: r for r in worse_slices(errors, memberships).iter_rows(named=True)}
    assert verdicts["worse"]["holds"] and verdicts["worse"]["low"] > 0
    assert not verdicts["few"]["holds"] and verdicts["few"]["difference"] > 0.4 and verdicts["few"]["n"] == 8
    assert not verdicts["noisy"]["holds"] and verdicts["noisy"]["low"] < 0 < verdicts["noisy"]["high"]
    again = worse_slices(errors, memberships)
    assert again.equals(worse_slices(errors, memberships))  # seeded: the same verdicts every time

    # In the comparison, a slice worse within noise is folded into one line with its count.
    evaluations = pl.DataFrame(
        [
            {"table_id": t, "split": "test", "slice": s, "n": n, "mape": m, "kendall_tau": 0.5}
            for s, n, ms in (
                ("worse", 200, (0.4, 0.1, 0.2)),
                ("few", 8, (0.4, 0.1, 0.6)),
                ("noisy", 300, (0.4, 0.2, 0.21)),
            )
            for t, m in zip(("x", "d", "l"), ms)
        ]
    )
    table = compare(evaluations, {"llvm-mca": "x", "default": "d", "learned": "l"}, worse_slices(errors, memberships))
    assert table.columns[:9] == [
        "split",
        "slice",
        "n",
        "llvm_mca_mape",
        "llvm_mca_tau",
        "default_mape",
        "default_tau",
        "learned_mape",
        "learned_tau",
    ]
    assert dict(zip(table["slice"], table["worse"])) == {"noisy": False, "few": False, "worse": True}
    assert worse_summary(table).startswith("worse; 2 other slices worse only within noise (fewer than 20 blocks")


def test_results_before_anything_and_without_a_warehouse(cli_env, haswell):
    missing = runner.invoke(app, ["results"])
    assert missing.exit_code == 2 and "no warehouse" in missing.stderr
    from difftune_pipeline.ingest import batches as ingest

    ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", cli_env / "w.duckdb", haswell)
    shown = runner.invoke(app, ["results"])
    assert shown.exit_code == 0 and "not evaluated yet" in shown.stdout and "materialize" in shown.stdout
    doc = runner.invoke(app, ["results", "--json"])
    assert '"blocks_measured": 2000' in doc.stdout and '"test_mape": null' in doc.stdout


INGEST = "key:block_sources or key:measurements or key:blocks or key:splits or key:quarantine"
KEYS = {
    "blocks": "block_id",
    "measurements": "block_id, uarch, batch_id, line_no",
    "block_sources": "block_id, app",
    "batches": "batch_id",
    "splits": "block_id",
}


def _ingest(folder: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIFFTUNE_")}
    env |= {"DIFFTUNE_PROFILE": "smoke", "DIFFTUNE_WAREHOUSE": str(folder / "w.duckdb")}
    env |= {"DAGSTER_HOME": str(folder.parent / "home")}
    command = [str(Path(sys.executable).parent / "difftune"), "materialize", "--select", INGEST]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=folder.parent)


def _counts(db: Path) -> dict:
    return {
        t: store.query(f"SELECT count(*) AS n, count(DISTINCT ({k})) AS keys FROM {t}", db).row(0)
        for t, k in KEYS.items()
    }


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounting a small filesystem needs root")
def test_a_full_disk_ends_in_one_line_and_the_next_run_completes(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", f"difftune-{uuid.uuid4().hex[:8]}", small])
    assert mounted.returncode == 0, "a tmpfs could not be mounted"
    try:
        full = _ingest(small)
        assert full.returncode == 2, full.stdout + full.stderr
        failed = [line for line in full.stderr.splitlines() if line.startswith("failed:")]
        assert len(failed) == 1 and "No space left on device" in failed[0], full.stderr
        assert "Traceback" not in full.stderr and full.stdout == ""
        # The warehouse still opens and is consistent: what it holds, it holds once.
        counts = _counts(small / "w.duckdb")
        assert all(n == keys for n, keys in counts.values()), counts
        # Space freed: the next run completes, with nothing lost and nothing twice: every line
        # of every input file is in a batch, ingested or quarantined, each row once.
        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)
        again = _ingest(small)
        assert again.returncode == 0, again.stderr
        counts = _counts(small / "w.duckdb")
        assert all(n == keys for n, keys in counts.values()), counts
        files = [SAMPLE / "bhive_hsw_sample.csv", *sorted((SAMPLE / "corpus").glob("*.csv"))]
        lines = sum(len(f.read_bytes().splitlines()) for f in files)
        totals = store.query(
            "SELECT count(*), sum(n_read), sum(n_ingested + n_quarantined) FROM batches", small / "w.duckdb"
        )
        assert totals.row(0) == (len(files), lines, lines)
        assert counts["measurements"][0] == 2000 and counts["blocks"][0] == counts["splits"][0]
    finally:
        subprocess.run(["umount", str(small)])

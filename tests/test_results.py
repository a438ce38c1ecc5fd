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
from difftune_pipeline.model.metrics import discordant_pairs, intervals, kendall_tau, mape, worse_slices
from difftune_pipeline.reporting.anatomy import anatomy
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


def test_intervals_say_how_far_a_thousand_blocks_pin_a_figure():
    """A thousand blocks 5% off pin MAPE and tau to intervals around the figures; a
    prediction 1 point closer beats it beyond noise, paired, while two draws of the
    same noise do not; the same seed gives the same intervals, a missing prediction
    leaves its figures, and mismatched inputs are refused."""
    rng = np.random.default_rng(7)
    measured = rng.uniform(50, 500, 1000)
    noisy = measured * (1 + rng.normal(0, 0.05, 1000))
    closer = measured * (1 + rng.normal(0, 0.04, 1000))
    again = measured * (1 + rng.normal(0, 0.05, 1000))
    found = intervals(
        {"noisy": noisy, "closer": closer, "again": again}, measured, (("closer", "noisy"), ("again", "noisy"))
    )
    for name, p in (("noisy", noisy), ("closer", closer)):
        (low, high), (tau_low, tau_high) = found[name]["mape"], found[name]["kendall_tau"]
        assert low < mape(p, measured) < high and high - low < 0.01
        assert tau_low < kendall_tau(p, measured) < tau_high and 0.005 < tau_high - tau_low < 0.02
    assert found["closer - noisy"]["mape"][1] < 0 and found["closer - noisy"]["kendall_tau"][0] > 0
    assert found["again - noisy"]["mape"][0] < 0 < found["again - noisy"]["mape"][1]
    assert found == intervals(
        {"noisy": noisy, "closer": closer, "again": again}, measured, (("closer", "noisy"), ("again", "noisy"))
    )
    assert intervals({"a": noisy, "b": noisy}, measured, (("a", "b"),))["a - b"] == {
        "mape": (0.0, 0.0),
        "kendall_tau": (0.0, 0.0),
    }
    holes = noisy.copy()
    holes[::10] = np.nan
    assert all(np.isfinite(v).all() for v in intervals({"holes": holes}, measured)["holes"].values())
    with pytest.raises(ValueError, match="999 predictions for 1000"):
        intervals({"short": noisy[:999]}, measured)
    with pytest.raises(ValueError, match="no such prediction"):
        intervals({"noisy": noisy}, measured, (("noisy", "other"),))


def test_blocks_no_table_explains_are_a_slice_and_x87_faults_are_not_among_them():
    """`fldz` alone, measured at 330 cycles an iteration (Ivy Bridge): llvm-mca predicts
    under one, the extended model its x87 fault; a `nop` measured at 100 cycles is ten
    times slower than every table, and one at 0.01 ten times faster."""
    from difftune_pipeline import harness
    from difftune_pipeline.engine import Engine, extended
    from difftune_pipeline.steps.evaluation import _unexplained, _x87_faults

    engine = Engine("haswell")
    blocks = [engine.parse_asm(a) for a in ("fldz\ntestq %rdi, %rdi", "nop", "nop", "addq %rax, %rbx")]
    blocks = [harness.accesses(b, "bhive").attach(b) for b in blocks]
    frame = pl.DataFrame({"block_id": ["fldz", "slow", "fast", "fine"], "cycles_per_100": [33000.0, 10000, 1, 100]})
    llvm = engine.default_table(blocks)
    results = [engine.simulate(blocks, t) for t in (llvm, llvm.with_model(extended.for_cpu("haswell"), "bhive"))]
    found = _unexplained(frame, results, "steady")
    assert sorted(found.iter_rows()) == [("fast", "unexplained:10x_faster"), ("slow", "unexplained:10x_slower")]
    assert _x87_faults(frame, blocks).rows() == [("fldz", "assist:x87")]


def test_blocks_measured_under_any_tables_floor_are_a_slice():
    """The floor: a one-cycle chain through `addq` (BHive: 0.48 cycles an iteration on
    Haswell, flagged), four instructions at four a cycle (measured 0.24, flagged; 0.80,
    not), two register moves (renamed away: only the issue width). On Zen+, whose
    front end is not modelled, a lone zero idiom has no floor at all."""
    from difftune_pipeline.engine import Engine
    from difftune_pipeline.model.graph import throughput_floors
    from difftune_pipeline.steps.evaluation import _below_floor

    engine = Engine("haswell")
    texts = (
        "addq $8, %r15\ncmpq %r13, %r15",
        "notq %r15\nleaq -1(%r14,%rbp), %rsi\nandq %r15, %rsi\nmovq %rbx, %rdi",
        "notq %r15\nleaq -1(%r14,%rbp), %rsi\nandq %r15, %rsi\nmovq %rbx, %rdi",
        "movq %rax, %rbx\nmovzbl %bl, %eax",
        "xorl %eax, %eax",
    )
    blocks = [engine.parse_asm(t) for t in texts]
    assert throughput_floors(blocks, 4).tolist() == [1.0, 1.0, 1.0, 0.5, 0.25]
    frame = pl.DataFrame(
        {"block_id": ["chain", "fast", "fine", "moves", "zero"], "cycles_per_100": [48.0, 24, 80, 40, 10]}
    )
    assert _below_floor(frame, blocks, "haswell").rows() == [
        ("chain", "unexplained:below_floor"),
        ("fast", "unexplained:below_floor"),
        ("zero", "unexplained:below_floor"),
    ]
    zen = Engine("znver1")
    assert _below_floor(frame[4:], [zen.parse_asm(texts[4])], "znver1").height == 0


def test_the_anatomy_says_which_blocks_carry_the_error():
    """Two blocks 50% off carry 100 of 110 points of error; the eight within 20%
    (one 10% off, seven exact) carry the rest. Shares are of the whole error."""
    measured = [100.0] * 10
    learned = [150.0, 50.0, 110.0] + [100.0] * 7
    predicted = pl.DataFrame({"block_id": [f"b{i}" for i in range(10)], "measured": measured, "learned": learned})
    memberships = pl.DataFrame({"block_id": ["b0", "b1", "b2", "b3"], "slice": ["class:x87"] * 2 + ["len:1-4"] * 2})
    rows = {r["slice"]: r for r in anatomy(predicted, "learned", memberships).iter_rows(named=True)}
    assert rows["all"] == {
        "slice": "all",
        "blocks": 10,
        "mape_pct": 11.0,
        "error_share_pct": 100.0,
        "discordant_share_pct": 0.0,  # every measurement tied: no pair counts against the table
        "beyond_20_pct": 20.0,
    }
    assert rows["beyond 20%"]["blocks"] == 2 and rows["beyond 20%"]["error_share_pct"] == pytest.approx(90.9)
    assert rows["within 20%"]["mape_pct"] == pytest.approx(1.25) and rows["within 20%"]["beyond_20_pct"] == 0
    assert rows["class:x87"]["error_share_pct"] == pytest.approx(90.9) and rows["len:1-4"]["blocks"] == 2
    assert list(rows)[:2] == ["all", "beyond 20%"]  # largest share first


def test_the_anatomy_says_which_blocks_cost_the_rank_correlation():
    """Blocks measured 1.0, 1.5, 2.0, 3.0 cycles and predicted 1.0, 1.0, 2.5, 2.0:
    the pair (1.5, 2.0) is ranked right, (2.0, 3.0) the wrong way round, and the
    tie in prediction (1.0, 1.5) counts for neither. Memory in chunks gives the same;
    a block the table did not simulate is in no pair."""
    measured, learned = [100.0, 150.0, 200.0, 300.0], [100.0, 100.0, 250.0, 200.0]
    assert discordant_pairs(learned, measured).tolist() == [0, 0, 1, 1]
    assert discordant_pairs(learned, measured, chunk=1).tolist() == [0, 0, 1, 1]
    predicted = pl.DataFrame(
        {"block_id": ["a", "b", "c", "d", "e"], "measured": [*measured, 400.0], "learned": [*learned, None]}
    )
    memberships = pl.DataFrame({"block_id": ["c"], "slice": ["class:div"]})
    rows = {r["slice"]: r for r in anatomy(predicted, "learned", memberships).iter_rows(named=True)}
    assert rows["all"]["discordant_share_pct"] == 100.0 and rows["class:div"]["discordant_share_pct"] == 50.0


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

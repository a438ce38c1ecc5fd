"""Quality gates a bad result must not pass: measurement sanity, engine
exactness against the ``llvm-mca`` binary, surrogate fidelity, and a learned
table no worse than the default on val. Each returns ``Verdict``; the Dagster
layer turns them into blocking asset checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from difftune_pipeline.engine import Engine

# Sanity bounds for a measurement batch. A BHive block sustains at most ~4.4
# instructions per cycle on Intel cores (99.9th percentile of the Haswell set);
# more than 5 on a sizeable share of rows means the file's unit is not cycles per
# 100 iterations (e.g. cycles per iteration) or the file is not BHive's.
MAX_QUARANTINED_FRACTION = 0.10
MAX_IPC = 5.0
MAX_IMPLAUSIBLE_FRACTION = 0.01


@dataclass
class Verdict:
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def measurement_sanity(rows: pl.DataFrame | None, batch_ids: list[str]) -> Verdict:
    """Each batch: few rows quarantined, and throughputs a real core can reach.
    ``rows``: per batch, rows read, ingested, quarantined and above ``MAX_IPC``
    instructions per cycle (``queries.batch_sanity``; not read when there is no batch).
    A dropped batch is not judged: it feeds nothing."""
    if not batch_ids:
        return Verdict(True, "no measurement batches to check")
    dropped = rows.filter(pl.col("status") == "dropped")["batch_id"].to_list()
    rows = rows.filter(pl.col("status") != "dropped").with_columns(
        (pl.col("n_quarantined") / pl.col("n_read").clip(lower_bound=1)).alias("quarantined_fraction"),
        (pl.col("n_implausible") / pl.col("n_ingested").clip(lower_bound=1)).alias("implausible_fraction"),
    )
    failed: dict[str, list[str]] = {}
    for r in rows.iter_rows(named=True):
        reasons = failed.setdefault(r["batch_id"], [])
        if r["n_ingested"] == 0:
            reasons.append(f"{r['source_file']}: no row became a measurement")
        if r["quarantined_fraction"] > MAX_QUARANTINED_FRACTION:
            reasons.append(
                f"{r['source_file']}: {100 * r['quarantined_fraction']:.1f}% of rows quarantined "
                f"(limit {100 * MAX_QUARANTINED_FRACTION:g}%)"
            )
        if r["implausible_fraction"] > MAX_IMPLAUSIBLE_FRACTION:
            reasons.append(
                f"{r['source_file']}: {100 * r['implausible_fraction']:.1f}% of blocks above {MAX_IPC:g} "
                "instructions per cycle: is the unit cycles per 100 iterations?"
            )
    failed = {b: reasons for b, reasons in failed.items() if reasons}
    missing = set(batch_ids) - set(rows["batch_id"]) - set(dropped)
    problems = [p for reasons in failed.values() for p in reasons]
    problems += [f"batch {b} is not in the warehouse" for b in sorted(missing)]
    return Verdict(
        not problems,
        "; ".join(problems)
        or f"{rows.height} batch(es) sane" + (f", {len(dropped)} dropped (not judged)" if dropped else ""),
        {"batches": rows.drop("source_file").to_dicts(), "failed": {b: "; ".join(r) for b, r in failed.items()}},
    )


def engine_exactness(engine: Engine, hexes: list[str], reference) -> Verdict:
    """The engine's Total Cycles on ``hexes`` equal the binary's (``reference``:
    AT&T lines per block -> cycles or None)."""
    blocks = [b for b in engine.disassemble_many(hexes) if b.ok]
    if not blocks:
        return Verdict(False, "no decodable block to compare on")
    ours = engine.simulate(blocks).cycles.tolist()
    theirs = reference([list(b.asm) for b in blocks])
    compared = [(a, b) for a, b in zip(ours, theirs) if b is not None]
    if not compared:
        return Verdict(False, f"the llvm-mca binary gave no result on {len(blocks)} blocks")
    differ = sum(a != b for a, b in compared)
    return Verdict(
        differ == 0,
        f"{len(compared) - differ}/{len(compared)} blocks equal to the llvm-mca binary",
        {"compared": len(compared), "different": differ, "binary_failed": len(blocks) - len(compared)},
    )


def surrogate_fidelity(heldout_mape: float, max_mape: float) -> Verdict:
    ok = heldout_mape == heldout_mape and heldout_mape <= max_mape  # NaN fails
    return Verdict(
        ok,
        f"held-out MAPE against the engine {100 * heldout_mape:.2f}% "
        f"({'within' if ok else 'above'} the {100 * max_mape:g}% limit)",
        {"heldout_mape_pct": round(100 * heldout_mape, 2), "limit_pct": 100 * max_mape},
    )


def no_worse_than_default(default_val_mape: float, learned_val_mape: float) -> Verdict:
    ok = learned_val_mape <= default_val_mape + 1e-12
    return Verdict(
        ok,
        f"val MAPE learned {100 * learned_val_mape:.2f}% vs default {100 * default_val_mape:.2f}%",
        {
            "default_val_mape_pct": round(100 * default_val_mape, 2),
            "learned_val_mape_pct": round(100 * learned_val_mape, 2),
        },
    )

"""Quality gates a bad result must not pass: measurement sanity (as judged at
ingestion, ``ingest.sanity``), engine
exactness against the ``llvm-mca`` binary, surrogate fidelity, and a learned
table no worse than the default on val. Each returns ``Verdict``; the Dagster
layer turns them into blocking asset checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from difftune_pipeline.engine import Engine


@dataclass
class Verdict:
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def measurement_sanity(rows: pl.DataFrame | None, batch_ids: list[str]) -> Verdict:
    """The verdicts ingestion gave the batches (``ingest.sanity``): failed when one
    of them is ``failed_sanity`` or missing. ``rows``: per batch, its status, the
    reason and its row counts (``batch_state.batch_statuses``; not read when there is no
    batch). A batch whose verdict does not stand (dropped, replaced, never fully read)
    is not judged: it feeds nothing."""
    if not batch_ids:
        return Verdict(True, "no measurement batches to check")
    unjudged = rows.filter(~pl.col("status").is_in(["ok", "failed_sanity"]))
    failed = rows.filter(pl.col("status") == "failed_sanity")
    problems = [
        f"{reason} (batch {b} never feeds tuning; withdraw it with `difftune batches drop {b}`)"
        for b, reason in failed.select("batch_id", "status_reason").iter_rows()
    ]
    missing = set(batch_ids) - set(rows["batch_id"])
    problems += [f"batch {b} is not in the warehouse" for b in sorted(missing)]
    judged = rows.height - unjudged.height
    return Verdict(
        not problems,
        "; ".join(problems)
        or f"{judged} batch(es) sane"
        + (f", {unjudged.height} {'/'.join(sorted(set(unjudged['status'])))} (not judged)" if unjudged.height else ""),
        {"batches": rows.drop("source_file").to_dicts()},
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

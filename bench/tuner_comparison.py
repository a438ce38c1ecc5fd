"""What the surrogate is worth, side by side, for one µarch: LLVM's values; the
direct search alone; the surrogate's gradient alone; the profile's composition.
Each table is learned as ``materialize`` learns it (``steps.learn``, the
profile's settings, pruning included, the one search budget) from the stored
simulations and surrogate; then, for each composition, the direct search again
with the composition's engine simulations as its budget (the same budget side
by side, about: the composition's count includes its pruning and fidelity check,
and the direct search prunes after spending it; it stops where no move pays, so
it may spend less).
Per row: val and test MAPE / τ, and each stage's val gain. Its costs are the
engine's simulations while tuning, the sampled pairs the surrogate learned
from, its training time and the tuning time.

    .venv/bin/python bench/tuner_comparison.py --db WAREHOUSE --mcpu haswell [--profile full]

WAREHOUSE is one that ``materialize`` filled for the µarch under the profile
(e.g. ``DIFFTUNE_PROFILE=full DIFFTUNE_DATA_DIR=$BHIVE_DATA DIFFTUNE_WAREHOUSE=warehouse/full.duckdb
difftune materialize --uarch haswell``). Each tuner's table is stored there, as
``DIFFTUNE_SETTINGS='{"tuner": …}'`` would store it; a table learned already is
read back with the stages and seconds it cost then.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import polars as pl

from difftune_pipeline import steps
from difftune_pipeline.config import override, settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.steps.surrogate import latest_surrogate
from difftune_pipeline.warehouse import simulations, tables

OUT = Path(__file__).parent / "out"
ROWS = {"direct": "direct search alone", "surrogate": "the surrogate's gradient alone"}
COMPOSITION = "the pipeline's composition"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--profile", default="sample")
    parser.add_argument(
        "--tuners", help="the rows after LLVM's values, comma-separated (default: direct, surrogate, the profile's)"
    )
    parser.add_argument("--set", default="{}", help="settings of every row, as DIFFTUNE_SETTINGS takes them")
    args = parser.parse_args()
    settings = settings_for(args.profile, json.loads(args.set))
    ctx = steps.StepContext(args.db, Engine(args.mcpu), settings)
    _, default = ctx.default_table()
    surrogate = latest_surrogate(ctx)
    sampled = [t.table_id for t in ctx.sampled_tables(ctx.space()[0])]
    pairs = simulations.simulation_totals(args.db, sampled)[0]
    print(
        f"{args.mcpu}, {args.profile}: the surrogate ({surrogate['model']}) learned from {pairs} simulated pairs "
        f"in {surrogate['train_seconds']:.0f} s (held-out {100 * surrogate['heldout_mape']:.2f}%)"
    )
    rows = [_row("LLVM's values", ctx, default, {})]
    for tuner in args.tuners.split(",") if args.tuners else ("direct", "surrogate", settings.tuner):
        name = ROWS.get(tuner, f"{COMPOSITION} ({tuner})")
        rows.append(_learned(ctx, override(settings, {"tuner": tuner}), name, pairs, surrogate))
    for composition in [r for r in rows if r["tuner"].startswith(COMPOSITION)]:
        # the direct search given every simulation the composition made, its pruning and fidelity
        # check included (the direct search prunes too: it has a little more), rounds in proportion
        budget = composition["tuning_simulations"]
        rounds = math.ceil(settings.search.rounds * budget / max(1, settings.search.budget))
        changes = {"tuner": "direct", "search.budget": budget, "search.rounds": max(rounds, settings.search.rounds)}
        rows.append(_learned(ctx, override(settings, changes), _at_budget(composition), pairs, surrogate))
    frame = pl.DataFrame(rows)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, tbl_hide_dataframe_shape=True, fmt_str_lengths=90):
        print(frame)
    _against_direct(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"tuner_comparison-{args.mcpu}-{args.profile}.json").write_text(json.dumps(rows, indent=1))


def _learned(ctx: steps.StepContext, settings, name: str, pairs: int, surrogate: dict) -> dict:
    """The row of the table ``steps.learn`` learns (or read back) under ``settings``."""
    chosen = steps.StepContext(ctx.db, ctx.engine, settings)
    table_id = steps.learn(chosen, log=print).table_id
    note = json.loads(tables.table_note(ctx.db, table_id))
    uses_surrogate = note["surrogate"] is not None
    return _row(
        name,
        ctx,
        tables.load_table(ctx.db, table_id),
        {
            "tuning_simulations": sum(s["engine_simulations"] for s in note["stages"]),
            "surrogate_pairs": pairs if uses_surrogate else 0,
            "surrogate_train_s": round(surrogate["train_seconds"]) if uses_surrogate else 0,
            "tuning_s": round(note["seconds"]),
            "val_gain_by_stage": ", ".join(f"{s['stage']} {-100 * s['val_gain']:+.2f}" for s in note["stages"]),
            "near_anchored_pct": next(
                (round(100 * s["near_anchored_mape"], 2) for s in note["stages"] if "near_anchored_mape" in s),
                None,
            ),
        },
    )


def _at_budget(composition: dict) -> str:
    return f"{ROWS['direct']}, at the simulations of {composition['tuner']}"


def _against_direct(rows: list[dict]) -> None:
    """The issue's ratios: what the gradient alone gains beside the direct search
    alone, and by how much each composition beats it on test, with what share of
    its simulations, and beats it given the composition's simulations."""
    by = {r["tuner"]: r for r in rows}
    base, direct, gradient = by[rows[0]["tuner"]], by.get(ROWS["direct"]), by.get(ROWS["surrogate"])
    for split in ("val", "test") if gradient and direct else ():
        gained, searched = (base[f"{split}_pct"] - r[f"{split}_pct"] for r in (gradient, direct))
        share = (
            f"{100 * gained / searched:.0f}% of the direct search's {searched:.2f}"
            if searched > 0
            else f"where the direct search gains none ({searched:+.2f})"
        )
        print(f"the gradient alone gains {gained:.2f} points of {split}, {share}")
    for r in rows:
        if not r["tuner"].startswith(COMPOSITION):
            continue
        if direct:
            print(
                f"{r['tuner']}: {direct['test_pct'] - r['test_pct']:+.2f} points of test better than the direct search "
                f"alone, with {r['tuning_simulations'] / direct['tuning_simulations']:.2f} times its simulations"
            )
        if (same := by.get(_at_budget(r))) is not None:
            print(
                f"{r['tuner']}: {same['test_pct'] - r['test_pct']:+.2f} points of test (val "
                f"{same['val_pct'] - r['val_pct']:+.2f}) better than the direct search given its "
                f"{r['tuning_simulations']} simulations ({same['tuning_simulations']} spent)"
            )


def _row(name: str, ctx: steps.StepContext, table, costs: dict) -> dict:
    (val, val_tau), (test, test_tau) = (ctx.score(table, split) for split in ("val", "test"))
    return {
        "tuner": name,
        "val_pct": round(100 * val, 2),
        "val_tau": round(val_tau, 3),
        "test_pct": round(100 * test, 2),
        "test_tau": round(test_tau, 3),
        **costs,
    }


if __name__ == "__main__":
    main()

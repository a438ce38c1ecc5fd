"""Every table a warehouse learned, side by side on its test split through the real
engine: llvm-mca as shipped, LLVM's values under the chosen model, and each learned
table (the measure it was tuned on, and, for a pruned one, the table the tuners
left before pruning, rebuilt from its history). Per table: MAPE and Kendall τ of
the steady state (what BHive measures) and the MAPE of llvm-mca's Total Cycles, the
share of test blocks predicted more than 20 points worse than the default, and
val MAPE (what selection saw).

    .venv/bin/python bench/accuracy.py --warehouse W.duckdb [W2.duckdb ...] [--mcpu haswell]

Give the warehouses of runs that differ in one setting (e.g. ``measure``, or
``prune.prune``): the same blocks and splits, a table each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.metrics import kendall_tau, mape
from difftune_pipeline.steps import StepContext
from difftune_pipeline.warehouse import connection, tables

WORSE_POINTS = 0.20


def before_pruning(table: ParamTable, note: dict) -> ParamTable | None:
    """The table the tuners left, from the pruning stage's record of what it undid."""
    stage = next((h for h in note.get("history", []) if h.get("stage") == "prune"), None)
    if stage is None:
        return None
    rows, globals_ = dict(table.rows), dict(table.globals)
    for key, value in {**stage.get("raised", {}), **stage.get("reverted", {})}.items():
        if isinstance(value, dict):
            rows[key] = value
        else:
            globals_[key] = value
    return ParamTable(table.mcpu, table.llvm_version, globals_, rows, table.mechanisms, table.harness)


def figures(ctx: StepContext, table: ParamTable, default_error: np.ndarray | None) -> dict:
    out = {}
    for split in ("val", "test"):
        frame, blocks = ctx.blocks(split)
        result = ctx.engine.simulate([blocks[b] for b in frame["block_id"]], table)
        truth, ok = frame["cycles_per_100"].to_numpy(), result.ok
        steady, total = result.predicted("steady"), result.predicted("total")
        if split == "val":
            out["val"] = mape(steady[ok], truth[ok])
            continue
        out |= {
            "mape": mape(steady[ok], truth[ok]),
            "tau": kendall_tau(steady[ok], truth[ok]),
            "total_mape": mape(total[ok], truth[ok]),
            "error": np.where(ok, np.abs(steady - truth) / truth, np.nan),
        }
    if default_error is not None:
        worse = out["error"] - default_error > WORSE_POINTS
        out["worse"] = float(np.mean(worse[~np.isnan(out["error"]) & ~np.isnan(default_error)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", type=Path, nargs="+", required=True)
    parser.add_argument("--mcpu", default="haswell")
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    print(f"-mcpu={args.mcpu}: test split, the real engine; steady = what BHive measures, total = Total Cycles")
    print(
        f"{'table':58s} {'val':>7s} {'test':>7s} {'tau':>6s} {'total':>7s} {'>20pt worse':>12s}  "
        "(MAPE; worse: than LLVM's values under the chosen model)"
    )
    for db in args.warehouse:
        ctx = StepContext(str(db), engine, settings_for("sample"))
        llvm_id, llvm = ctx.llvm_mca_table()
        default_id, default = ctx.default_table()
        base = figures(ctx, default, None)
        rows = [("llvm-mca as shipped", llvm), (f"LLVM's values ({default.model})", default)]
        learned = connection.query(
            "SELECT table_id, note FROM param_tables WHERE kind = 'learned' AND mcpu = ? ORDER BY created_at",
            db,
            [args.mcpu],
        )
        for table_id, note in learned.iter_rows():
            note = json.loads(note or "{}")
            table = tables.load_table(db, table_id)
            label = f"learned, {note.get('measure', 'total')}"
            unpruned = before_pruning(table, note)
            if unpruned is not None:
                rows.append((f"{label}, before pruning", unpruned))
                label += ", pruned"
            rows.append((f"{label} ({table_id[-12:]})", table))
        print(f"{db}:")
        for label, table in rows:
            f = base if table is default else figures(ctx, table, base["error"])
            worse = f.get("worse")
            print(
                f"  {label:56s} {100 * f['val']:6.2f}% {100 * f['mape']:6.2f}% {f['tau']:6.3f} "
                f"{100 * f['total_mape']:6.2f}% {'' if worse is None else f'{100 * worse:10.2f}%':>12s}"
            )


if __name__ == "__main__":
    main()

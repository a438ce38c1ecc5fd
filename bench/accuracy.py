"""Every table a warehouse learned, side by side on its test split through the real
engine: llvm-mca as shipped, LLVM's values under the chosen model, and each learned
table (the measure it was tuned on, and, for a pruned one, the table the tuners
left before pruning, rebuilt from its history, and the table without each new
stall: the length-changing prefix, the predecoder's instruction limit, Zen+'s zero-count
shift, Ivy Bridge's L1 bank conflicts, the partial-register merge). Per table: MAPE and
Kendall τ of the steady state (what BHive measures) and the MAPE of llvm-mca's Total Cycles, the
share of test blocks predicted more than 20 points worse than the default, and
val MAPE (what selection saw).

    .venv/bin/python bench/accuracy.py --warehouse W.duckdb [W2.duckdb ...] [--mcpu haswell] \
        [--unseen 1000 --data ../shared/data]

``--unseen N``: also score every table on the first N blocks of BHive's file for the
µarch that the warehouse has never seen (not among its blocks).

Give the warehouses of runs that differ in one setting (e.g. ``measure``, or
``prune.prune``): the same blocks and splits, a table each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from common import add_data_argument, bhive_rows

from difftune_pipeline import harness
from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.metrics import WORSE_POINTS, scored
from difftune_pipeline.steps import StepContext
from difftune_pipeline.warehouse import connection, tables


def before_pruning(table: ParamTable, note: dict) -> ParamTable | None:
    """The table the tuners left, from the pruning stage's record of what it undid."""
    stage = next((h for h in note.get("history", []) if h.get("stage") == "prune"), None)
    if stage is None:
        return None
    rows, globals_ = dict(table.rows), dict(table.globals)
    undone = {**stage.get("raised", {}), **stage.get("reverted", {}), **stage.get("from_siblings", {})}
    for key, value in undone.items():
        if isinstance(value, dict):
            rows[key] = value
        else:
            globals_[key] = value
    return ParamTable(table.mcpu, table.llvm_version, globals_, rows, table.mechanisms, table.harness)


def without_new_mechanisms(table: ParamTable) -> list[tuple[str, ParamTable]]:
    """The table without each stall added since the steady state, not re-tuned:
    the length-changing prefix (``lcp_penalty`` 0), the predecoder's limit on
    instructions a cycle (``predecode_width`` 16), Zen+'s zero-count shift, Sandy
    and Ivy Bridge's L1 bank conflicts and Intel's partial-register merges."""
    out = []
    if "front_end" in table.mechanisms:
        for name, value, label in (("lcp_penalty", 0, "no LCP stall"), ("predecode_width", 16, "no predecode limit")):
            globals_ = {**table.globals, name: value}
            out.append((label, ParamTable(table.mcpu, table.llvm_version, globals_, table.rows,
                                          table.mechanisms, table.harness)))  # fmt: skip
    for mechanism, label in (
        ("zero_shift", "no zero-count shift assist"),
        ("bank_conflict", "no L1 bank conflicts"),
        ("partial_register", "no partial-register merge"),
    ):
        if mechanism in table.mechanisms:
            rest = tuple(m for m in table.mechanisms if m != mechanism)
            out.append((label, table.with_model(rest, table.harness)))
    return out


def scored_against(engine: Engine, table: ParamTable, blocks: list, truth: np.ndarray, base: dict | None) -> dict:
    """MAPE and τ of the steady state, MAPE of the Total Cycles, each block's error,
    and the share of blocks more than 20 points worse than under ``base``."""
    result = engine.simulate(blocks, table)
    (steady_mape, tau), (total_mape, _) = scored(result, truth), scored(result, truth, "total")
    error = np.where(result.ok, np.abs(result.predicted("steady") - truth) / truth, np.nan)
    out = {"mape": steady_mape, "tau": tau, "total_mape": total_mape, "error": error}
    if base is not None:
        both = ~np.isnan(out["error"]) & ~np.isnan(base["error"])
        out["worse"] = float(np.mean(out["error"][both] - base["error"][both] > WORSE_POINTS))
    return out


def splits(ctx: StepContext) -> dict[str, tuple[list, np.ndarray]]:
    out = {}
    for split in ("val", "test"):
        frame, blocks = ctx.blocks(split)
        out[split] = [blocks[b] for b in frame["block_id"]], frame["cycles_per_100"].to_numpy()
    return out


def unseen(engine: Engine, db: Path, n: int, data: Path) -> tuple[list, np.ndarray]:
    """The first ``n`` blocks of BHive's file that the warehouse has no block of, with BHive-harness addresses."""
    known = set(connection.query("SELECT hex FROM blocks", db)["hex"].to_list())
    rows = [(h, c) for h, c in bhive_rows(engine.mcpu, None, data) if h.lower() not in known]
    blocks, truth = [], []
    for c, b in zip([c for _, c in rows], engine.disassemble_many([h for h, _ in rows])):
        if b.ok:
            blocks.append(harness.accesses(b, "bhive").attach(b))
            truth.append(c)
        if len(blocks) == n:
            break
    return blocks, np.array(truth)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", type=Path, nargs="+", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--unseen", type=int, default=0)
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    print(f"-mcpu={args.mcpu}: test split, the real engine; steady = what BHive measures, total = Total Cycles")
    sets = ["test"] + (["unseen"] if args.unseen else [])
    print(
        f"{'table':58s} {'val':>7s} "
        + " ".join(f"{s + ': MAPE':>12s} {'tau':>6s} {'total':>7s} {'worse':>7s}" for s in sets)
    )
    print("(worse: blocks more than 20 points worse than under LLVM's values with the chosen model)")
    for db in args.warehouse:
        ctx = StepContext(str(db), engine, settings_for("sample"))
        llvm_id, llvm = ctx.llvm_mca_table()
        default_id, default = ctx.default_table()
        data = splits(ctx)
        if args.unseen:
            data["unseen"] = unseen(engine, db, args.unseen, args.data)
        base = {s: scored_against(engine, default, *data[s], None) for s in sets}
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
            rows += [(f"{label}, {what}", t) for what, t in without_new_mechanisms(table)]
        print(f"{db}: {', '.join(f'{s} {len(data[s][0])} blocks' for s in data)}")
        for label, table in rows:
            val = scored_against(engine, table, *data["val"], None)["mape"]
            cells = []
            for s in sets:
                f = base[s] if table is default else scored_against(engine, table, *data[s], base[s])
                worse = f.get("worse")
                cells.append(
                    f"{100 * f['mape']:11.2f}% {f['tau']:6.3f} {100 * f['total_mape']:6.2f}% "
                    + ("       " if worse is None else f"{100 * worse:6.2f}%")
                )
            print(f"  {label:56s} {100 * val:6.2f}% " + " ".join(cells))


if __name__ == "__main__":
    main()

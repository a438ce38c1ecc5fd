"""The pruning stage's rules side by side, on the very table the tuners left: a
warehouse's newest learned table is rebuilt as it was before pruning (from the
stage's record) and pruned again under each rule, so the tuners' run-to-run
noise is out of the comparison. Per table: rows moved from LLVM's, val MAPE (what
pruning saw), and on test (and ``--unseen N`` BHive blocks the warehouse never
saw) MAPE and τ of the steady state and the share of blocks more than 20 points
worse than LLVM's values under the chosen model.

    .venv/bin/python bench/pruning.py --warehouse W.duckdb [--mcpu haswell] [--profile full] \
        [--unseen 1000 --data ../shared/data] [--harm-share 0.1 ...]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from accuracy import before_pruning, scored, splits, unseen
from common import add_data_argument

from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.steps import StepContext
from difftune_pipeline.tuners import Problem
from difftune_pipeline.tuners.pruning import Pruning
from difftune_pipeline.warehouse import connection, tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--profile", default="sample", help="the profile the warehouse was tuned with")
    parser.add_argument("--unseen", type=int, default=0)
    parser.add_argument("--harm-share", type=float, nargs="*", default=[], help="more prune.harm_share values")
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    ctx = StepContext(args.warehouse, engine, settings_for(args.profile))
    _, default = ctx.default_table()
    learned = connection.query(
        "SELECT table_id, note FROM param_tables WHERE kind = 'learned' AND mcpu = ? ORDER BY created_at DESC",
        args.warehouse,
        [args.mcpu],
    )
    if learned.is_empty():
        raise SystemExit(f"{args.warehouse} holds no learned table of {args.mcpu}")
    table_id, note = learned.row(0)
    stored = tables.load_table(args.warehouse, table_id)
    start = before_pruning(stored, json.loads(note or "{}"))
    if start is None:
        raise SystemExit(f"{table_id} was not pruned: nothing to compare")
    data = splits(ctx)
    if args.unseen:
        data["unseen"] = unseen(engine, args.warehouse, args.unseen, args.data)
        if not data["unseen"][0]:
            raise SystemExit(f"every block of BHive's {args.mcpu} file is in {args.warehouse}: no unseen blocks")
    frame, train = ctx.blocks("train")
    problem = Problem(
        engine=engine,
        blocks=[train[b] for b in frame["block_id"]],
        measured=frame["cycles_per_100"].to_numpy(),
        default=default,
        score=lambda t: ctx.score(t, "val")[0],
        log=lambda _: None,
        measure=ctx.settings.measure,
        val_blocks=data["val"][0],
        val_measured=data["val"][1],
    )
    config = ctx.settings.prune
    rules = [
        ("before pruning", start),
        ("stored", stored),
        ("pruned, val alone (train_blocks 0)", Pruning(replace(config, train_blocks=0)).tune(start, problem)[0]),
        ("no val block harmed (harm_share 0)", Pruning(replace(config, harm_share=0)).tune(start, problem)[0]),
        (f"pruned, val and train ({config.train_blocks})", Pruning(config).tune(start, problem)[0]),
        ("the same, no physics floors", Pruning(replace(config, physics=False)).tune(start, problem)[0]),
    ]
    for share in args.harm_share:
        rules.append((f"harm_share {share}", Pruning(replace(config, harm_share=share)).tune(start, problem)[0]))
    base = {s: scored(engine, default, *data[s], None) for s in data}
    print(f"{args.warehouse}: {table_id}, -mcpu={args.mcpu}; " + ", ".join(f"{s} {len(data[s][0])}" for s in data))
    print(
        f"{'table':40s} {'rows':>5s} {'val':>7s} "
        + " ".join(f"{s + ' MAPE':>12s} {'tau':>6s} {'worse':>7s}" for s in data if s != "val")
    )
    print(f"{'LLVM values':40s} {0:5d} {100 * base['val']['mape']:6.2f}% " + " ".join(
        f"{100 * base[s]['mape']:11.2f}% {base[s]['tau']:6.3f}        " for s in data if s != "val"))  # fmt: skip
    for label, table in rules:
        val = scored(engine, table, *data["val"], None)["mape"]
        cells = []
        for s in data:
            if s != "val":
                f = scored(engine, table, *data[s], base[s])
                cells.append(f"{100 * f['mape']:11.2f}% {f['tau']:6.3f} {100 * f['worse']:6.2f}%")
        print(f"{label:40s} {len(table.changed_rows(default)):5d} {100 * val:6.2f}% " + " ".join(cells))


if __name__ == "__main__":
    main()

"""Where the structured surrogate misses the engine near a table, block by block:
what ``tuners.fidelity`` sums up into one figure (val blocks, tables drawn inside
the trust region, the surrogate trusted for differences), taken apart into the
(block, drawn table) pairs it gets most wrong, each with the rows the table moved
there. A row that moves the engine and not the surrogate, over and over, is a
mechanism the surrogate's bounds lack.

    .venv/bin/python bench/surrogate_gaps.py --db WAREHOUSE --mcpu haswell [--around default|learned]

WAREHOUSE is one that ``materialize`` filled under the ``full`` profile; the
surrogate is the µarch's latest, as the tuning reads it.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from difftune_pipeline import steps
from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.steps.surrogate import latest_surrogate, load_surrogate
from difftune_pipeline.tuners.base import predict_batched
from difftune_pipeline.tuners.fidelity import drawn_tables
from difftune_pipeline.warehouse import tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--around", choices=("default", "learned"), default="default")
    parser.add_argument("--draws", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    ctx = steps.StepContext(args.db, Engine(args.mcpu), settings_for("full"))
    surrogate = load_surrogate(latest_surrogate(ctx))
    _, default = ctx.default_table()
    table = default if args.around == "default" else tables.load_table(ctx.db, tables.latest_learned(ctx.db, args.mcpu))
    frame, by_id = ctx.blocks("val")
    blocks = [by_id[b] for b in frame["block_id"]]
    space = ParamSpace.create(surrogate.row_keys, ctx.engine, default)
    predict = surrogate.predictor(blocks)
    trust = ctx.settings.tune.trust
    drawn = drawn_tables(space, table, trust, args.draws, 0.25, np.random.default_rng(args.seed))
    at = ctx.engine.simulate(blocks, table).predicted_or_nan("steady")
    engine = np.array([ctx.engine.simulate(blocks, t).predicted_or_nan("steady") for t in drawn])
    idx = np.flatnonzero(~np.isnan(engine).any(0) & ~np.isnan(at))
    cycles = lambda t: predict_batched(predict, *space.encode(t), idx).numpy()  # noqa: E731
    base, levels, truth = cycles(table), np.array([cycles(t) for t in drawn]), engine[:, idx]
    error = np.abs(at[idx] + levels - base - truth) / truth  # trusted for differences, per (draw, block)
    change = np.abs(truth - at[idx]) / truth
    print(
        f"{args.mcpu}, around the {args.around} table: {len(idx)} val blocks x {args.draws} tables drawn "
        f"({trust} log_scale units, a quarter of the rows): the engine moves {100 * change.mean():.2f}%, "
        f"the surrogate trusted for differences is {100 * error.mean():.2f}% off it"
    )
    matrix = space.encode(table)[0]
    moved = [set(np.flatnonzero(np.any(space.encode(t)[0] != matrix, axis=1))) for t in drawn]
    by_row = collections.Counter()
    for k, j in zip(*np.nonzero(error)):
        keys = [key for key in dict.fromkeys(blocks[idx[j]].row_keys) if space.index.get(key) in moved[k]]
        for key in keys:
            by_row[key] += error[k, j] / len(keys) / error.size
    print("rows by the error of the pairs they moved in (points of the mean):")
    for key, share in by_row.most_common(args.top):
        print(f"  {key:28s} {100 * share:.3f}")
    print("the pairs most wrong: error, engine at the table -> drawn, surrogate likewise | block | what moved")
    for flat in np.argsort(-error, axis=None)[: args.top]:
        k, j = np.unravel_index(flat, error.shape)
        block = blocks[idx[j]]
        keys = [key for key in dict.fromkeys(block.row_keys) if space.index.get(key) in moved[k]]
        what = "; ".join(
            f"{key} {field} {table.rows[key][field]}->{drawn[k].rows[key][field]}"
            for key in keys[:2]
            for field in ("latency", "uops", "ports")
            if table.rows[key][field] != drawn[k].rows[key][field]
        )
        print(
            f"  {100 * error[k, j]:5.1f}%  {at[idx[j]]:.0f}->{truth[k, j]:.0f}  {base[j]:.0f}->{levels[k, j]:.0f}"
            f" | {' ; '.join(block.asm)[:70]} | {what[:160]}"
        )


if __name__ == "__main__":
    main()

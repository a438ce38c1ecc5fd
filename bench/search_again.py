"""The direct search run again from its own result, measured: from each µarch's
newest learned table in a warehouse, ``--runs`` searches of the ``full``
profile's settings one after the other, each from the last one's table, scored
on train, val and test through the real engine; then, for comparison, one
search from the same start with twice the budget.

    .venv/bin/python bench/search_again.py --warehouse W.duckdb [--mcpu haswell] [--runs 4]

W is a warehouse the ``full`` profile tuned without searching again
(``DIFFTUNE_SETTINGS='{"search.repeats": 0}'``); it is only read.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from common import Splits

from difftune_pipeline import config
from difftune_pipeline.engine import Engine
from difftune_pipeline.steps.context import SPLITS
from difftune_pipeline.warehouse import tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "skylake", "ivybridge"])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    for mcpu in args.mcpu:
        measure(mcpu, args.warehouse, args.runs)


def measure(mcpu: str, warehouse: str, runs: int) -> None:
    learned_id = tables.latest_learned(warehouse, mcpu)
    if learned_id is None:
        raise SystemExit(f"{warehouse} holds no learned table for {mcpu}: materialise learned_params first")
    start = tables.load_table(warehouse, learned_id)
    splits = Splits(Engine(mcpu), warehouse, mcpu, start.harness)
    default = splits.default(start.mechanisms, start.harness)  # under the learned table's model
    settings = config.settings_for("full").search

    def report(label, table, t0):
        (train, _), (val, _), (test, tau) = (splits.scored(table, s) for s in SPLITS)
        print(
            f"  {label:>22s}: train {100 * train:.2f}%  val {100 * val:.2f}%  test {100 * test:.2f}% (tau {tau:.3f})"
            f"  rows changed {len(table.changed_rows(default))}  {time.perf_counter() - t0:.0f} s",
            flush=True,
        )

    print(f"{mcpu} ({start.model}), budget {settings.budget} a search:")
    report("the learned table", start, time.perf_counter())
    table = start
    for k in range(1, runs + 1):
        t0 = time.perf_counter()
        table = splits.search(default, settings, start=table)
        report(f"search {k}", table, t0)
    t0 = time.perf_counter()
    doubled = dataclasses.replace(settings, budget=2 * settings.budget)
    report("one search, 2x budget", splits.search(default, doubled, start=start), t0)


if __name__ == "__main__":
    main()

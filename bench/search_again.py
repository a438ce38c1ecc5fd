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

from ablation import split_blocks

from difftune_pipeline import config, harness
from difftune_pipeline.engine import Engine
from difftune_pipeline.model.metrics import kendall_tau, mape
from difftune_pipeline.tuners.search import search
from difftune_pipeline.warehouse import queries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "skylake", "ivybridge"])
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    for mcpu in args.mcpu:
        measure(mcpu, args.warehouse, args.runs)


def measure(mcpu: str, warehouse: str, runs: int) -> None:
    engine = Engine(mcpu)
    learned_id = queries.latest_learned(warehouse, mcpu)
    if learned_id is None:
        raise SystemExit(f"{warehouse} holds no learned table for {mcpu}: materialise learned_params first")
    start = queries.load_table(warehouse, learned_id)
    data = {s: split_blocks(engine, warehouse, mcpu, s) for s in ("train", "val", "test")}
    blocks = {s: [harness.accesses(b, start.harness).attach(b) for b in d[1]] for s, d in data.items()}
    default = engine.default_table([b for d in data.values() for b in d[1]])
    if start.mechanisms:  # the learned table's model and harness
        default = default.with_model(start.mechanisms, start.harness)
    settings = config.settings_for("full").search

    def scored(table, split):
        r = engine.simulate(blocks[split], table)
        truth = data[split][2][r.ok]
        return mape(r.cycles[r.ok], truth), kendall_tau(r.cycles[r.ok], truth)

    def once(table, budget):
        found, _ = search(
            engine,
            blocks["train"],
            data["train"][2],
            default,
            lambda t: scored(t, "val")[0],
            dataclasses.replace(settings, budget=budget),
            start=table,
            log=lambda *_: None,
        )
        return found

    def report(label, table, t0):
        (train, _), (val, _), (test, tau) = (scored(table, s) for s in data)
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
        table = once(table, settings.budget)
        report(f"search {k}", table, t0)
    t0 = time.perf_counter()
    report("one search, 2x budget", once(start, 2 * settings.budget), t0)


if __name__ == "__main__":
    main()

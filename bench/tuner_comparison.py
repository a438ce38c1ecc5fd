"""One comparison table per µarch: the default table, DiffTune (the Ithemal-style
LSTM surrogate), the structured surrogate, direct search on the engine, and the
two combined — test MAPE and Kendall τ through the real engine, the slices each
makes worse than the default, simulator calls and wall time on this machine.

    .venv/bin/python bench/tuner_comparison.py --db WAREHOUSE --mcpu haswell

WAREHOUSE is one the ``full`` profile has materialised for the µarch (its
simulations and DiffTune's learned table), e.g.
``DIFFTUNE_PROFILE=full DIFFTUNE_DATA_DIR=../shared/data DIFFTUNE_MCPU=haswell make run``.
The warehouse is only read; the tables learned here are written to
``bench/out/tables/``. The structured surrogate gets the LSTM's training time
(capped by ``--structured-seconds``); direct search and the combination's search
get the simulations DiffTune's dataset cost (``--budget``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import polars as pl

from difftune_pipeline import datasets, store, structured
from difftune_pipeline.engine import Engine
from difftune_pipeline.evaluate import kendall_tau, mape, slices
from difftune_pipeline.params import ParamSpace
from difftune_pipeline.pipeline import Settings, Stage
from difftune_pipeline.search import SearchConfig, gradient_proposer, search
from difftune_pipeline.structured import StructuredBlocks, StructuredConfig
from difftune_pipeline.tune import TuneConfig, gradient, tune

OUT = Path(__file__).parent / "out"
FULL = Settings(tables_per_preset=32, blocks_per_table=3000, tune=TuneConfig(steps=400))


def test_metrics(stage: Stage, table, frame: pl.DataFrame, blocks: dict, members: pl.DataFrame) -> dict:
    """Test MAPE/τ overall, per slice (and which slices are worse than the default)."""
    result = stage.engine.simulate([blocks[b] for b in frame["block_id"]], table)
    pred = frame.select("block_id", "cycles_per_100").with_columns(pl.Series("cycles", result.cycles))
    pred = pred.filter(pl.Series(result.ok))
    by_slice = (pred.join(members, on="block_id").group_by("slice")
                .agg(pl.len().alias("n"), ((pl.col("cycles") - pl.col("cycles_per_100")).abs()
                                           / pl.col("cycles_per_100")).mean().alias("mape")))
    return {"mape": mape(pred["cycles"], pred["cycles_per_100"]),
            "kendall_tau": kendall_tau(pred["cycles"], pred["cycles_per_100"]),
            "slices": dict(zip(by_slice["slice"], by_slice["mape"])),
            "slice_n": dict(zip(by_slice["slice"], by_slice["n"]))}


def simulation_rate(stage: Stage, space, default, tables, train_blocks, n: int = 4000) -> float:
    """Pairs per second of the engine on (train block, sampled table) pairs, as the simulations asset runs them."""
    ids = sorted(train_blocks)[:n // len(tables) + 1]
    sampled = [space.sampled_table(t.preset, t.seed, default) for t in tables]
    b = np.repeat(np.arange(len(ids)), len(sampled))[:n]
    t = np.tile(np.arange(len(sampled)), len(ids))[:n]
    t0 = time.perf_counter()
    stage.engine.simulate_pairs([train_blocks[i] for i in ids], sampled, b, t)
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--budget", type=int, default=0, help="search simulations (0: DiffTune's dataset size)")
    parser.add_argument("--structured-seconds", type=float, default=300.0)
    parser.add_argument("--tune-steps", type=int, default=FULL.tune.steps)
    args = parser.parse_args()
    settings = replace(FULL, tune=replace(FULL.tune, steps=args.tune_steps))
    stage = Stage(args.db, Engine(args.mcpu), settings)
    space, default, train_blocks = stage.space()
    tables = stage.tables(space)
    train_frame, _ = stage.blocks("train")
    val_frame, val_blocks = stage.blocks("val")
    test_frame, test_blocks = stage.blocks("test")
    default_id, default_all = stage.default_table_id()
    members = slices(test_frame.select("block_id", "n_insts", "asm"),
                     store.query("SELECT block_id, app FROM block_sources", args.db))
    measured = train_frame["cycles_per_100"].to_numpy()
    val = lambda t: stage.score(t, val_frame, val_blocks)[0]  # noqa: E731
    blocks = [train_blocks[b] for b in train_frame["block_id"]]
    rate = simulation_rate(stage, space, default, tables, train_blocks)
    n_sims = store.query("SELECT count(*) FROM simulations WHERE status = 'ok' AND table_id IN (SELECT unnest(?))",
                         args.db, [[t.table_id for t in tables]]).item()
    budget = args.budget or n_sims
    dataset_seconds = n_sims / rate
    print(f"{args.mcpu}: {len(blocks)} train blocks, {n_sims} simulated pairs ({rate:.0f} pairs/s: "
          f"{dataset_seconds:.0f} s to simulate), search budget {budget}")
    results = {"default": {**test_metrics(stage, default_all, test_frame, test_blocks, members),
                           "simulations": 0, "seconds": 0.0}}
    (OUT / "tables").mkdir(parents=True, exist_ok=True)

    # DiffTune: the Ithemal-style LSTM and the table learned through it, as the full profile stored them.
    lstm = store.query("SELECT * FROM surrogate_runs WHERE mcpu = ? AND model IN ('ithemal', 'ithemal-lstm') "
                       "ORDER BY created_at DESC LIMIT 1", args.db, [args.mcpu]).row(0, named=True)
    learned = store.query("SELECT table_id, note FROM param_tables WHERE kind = 'learned' AND mcpu = ? "
                          "AND note LIKE ? ORDER BY created_at DESC LIMIT 1", args.db,
                          [args.mcpu, f'%{lstm["run_id"]}%']).row(0, named=True)
    note = json.loads(learned["note"])
    results["difftune_lstm"] = {**test_metrics(stage, store.load_table(learned["table_id"], args.db), test_frame,
                                               test_blocks, members),
                                "simulations": n_sims, "surrogate_heldout_mape": lstm["heldout_mape"],
                                "surrogate_train_seconds": lstm["train_seconds"],
                                "seconds": dataset_seconds + lstm["train_seconds"] + note["seconds"]}

    # The structured surrogate: same simulations, the LSTM's training time (capped).
    t0 = time.perf_counter()
    pairs = datasets.simulated_pairs(args.db, space, default, tables, train_blocks)
    graphs = StructuredBlocks.build([train_blocks[b] for b in pairs.block_ids], {k: i for i, k in enumerate(space.keys)})
    seconds = min(lstm["train_seconds"], args.structured_seconds)
    model, report = structured.train(graphs, pairs.tables, pairs.globals_, pairs.block_idx, pairs.table_idx,
                                     pairs.cycles, list(space.keys), stage.engine.resources(),
                                     StructuredConfig(seconds=seconds, max_epochs=1000))
    predict = model.predictor(model.tensors(blocks))
    space = ParamSpace.create(model.row_keys, stage.engine.resources())
    learned_s, _ = tune(predict, len(blocks), space, default_all, measured, val, settings.tune)
    s_seconds = time.perf_counter() - t0
    results["structured"] = {**test_metrics(stage, learned_s, test_frame, test_blocks, members),
                             "simulations": n_sims, "surrogate_heldout_mape": report["heldout_mape"],
                             "surrogate_train_seconds": report["train_seconds"],
                             "seconds": dataset_seconds + s_seconds}
    learned_s.to_json(OUT / "tables" / f"{args.mcpu}-structured.json")

    # Direct search on the engine, DiffTune's simulation budget.
    config = SearchConfig(budget=budget, rounds=3)
    t0 = time.perf_counter()
    learned_d, hist_d = search(stage.engine, blocks, measured, default_all, val, config)
    results["direct_search"] = {**test_metrics(stage, learned_d, test_frame, test_blocks, members),
                                "simulations": hist_d[-1]["simulations"], "seconds": time.perf_counter() - t0}
    learned_d.to_json(OUT / "tables" / f"{args.mcpu}-direct.json")

    # Combined: the structured surrogate's table, then moves its gradient proposes and the engine accepts.
    t0 = time.perf_counter()
    proposer = lambda table: gradient_proposer(gradient(predict, len(blocks), space, table, measured), space.columns)  # noqa: E731
    learned_c, hist_c = search(stage.engine, blocks, measured, default_all, val, config, start=learned_s, proposer=proposer)
    results["combined"] = {**test_metrics(stage, learned_c, test_frame, test_blocks, members),
                           "simulations": n_sims + hist_c[-1]["simulations"],
                           "seconds": results["structured"]["seconds"] + time.perf_counter() - t0}
    learned_c.to_json(OUT / "tables" / f"{args.mcpu}-combined.json")

    base = results["default"]["slices"]
    rows = []
    for name, r in results.items():
        apps = [s for s in base if s.startswith("app:") and r["slices"].get(s, 0) > base[s] + 1e-12]
        rows.append({"method": name, "test_mape_pct": round(100 * r["mape"], 2), "kendall_tau": round(r["kendall_tau"], 3),
                     "ml_kernels_mape_pct": round(100 * r["slices"].get("ml:all", float("nan")), 2),
                     "other_mape_pct": round(100 * r["slices"].get("ml:none", float("nan")), 2),
                     "apps_worse": len(apps), "simulations": r["simulations"], "wall_seconds": round(r["seconds"])})
    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
        print(table)
    (OUT / f"tuner_comparison-{args.mcpu}.json").write_text(json.dumps(
        {"mcpu": args.mcpu, "table": rows, "results": results, "budget": budget,
         "structured": asdict(replace(StructuredConfig(), seconds=seconds))}, indent=1, default=str))


if __name__ == "__main__":
    main()

"""One comparison table per µarch: the default table, DiffTune (the Ithemal-style
LSTM surrogate), the structured surrogate, direct search on the engine, and the
two combined — test MAPE and Kendall τ through the real engine, the slices each
makes worse than the default, simulator calls and wall time on this machine.

    .venv/bin/python bench/tuner_comparison.py --db WAREHOUSE --mcpu haswell

WAREHOUSE is one the ``full`` profile has materialised for the µarch (its
simulations and DiffTune's learned table), e.g.
``DIFFTUNE_PROFILE=full DIFFTUNE_DATA_DIR=../shared/data make run``; the
settings are that profile's (``difftune_pipeline.config``).
The warehouse is only read; the tables learned here are written to
``bench/out/tables/``. The structured surrogate trains for the profile's epochs
(``structured.epochs``, a budget of work); direct search and the combination's search
get the simulations DiffTune's dataset cost (``--budget``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import polars as pl

from difftune_pipeline.config import override, settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.model.metrics import kendall_tau, mape, metrics_by_slice, slices
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.steps import StepContext
from difftune_pipeline.steps.surrogate import stored_pairs
from difftune_pipeline.surrogates.structured import StructuredSurrogate
from difftune_pipeline.tuners import Problem, SurrogateView
from difftune_pipeline.tuners.direct import DirectSearch
from difftune_pipeline.tuners.gradient import SurrogateTuner
from difftune_pipeline.warehouse import ingestion, simulations, tables

OUT = Path(__file__).parent / "out"


def test_metrics(ctx: StepContext, table, frame: pl.DataFrame, blocks: dict, members: pl.DataFrame) -> dict:
    """Test MAPE/τ overall, per slice (and which slices are worse than the default)."""
    result = ctx.engine.simulate([blocks[b] for b in frame["block_id"]], table)
    pred = frame.select("block_id", "cycles_per_100").with_columns(
        pl.Series("cycles", result.predicted(ctx.settings.measure))
    )
    pred = pred.filter(pl.Series(result.ok))
    test = pred.select("block_id", pl.lit("test").alias("split"))
    by_slice = metrics_by_slice(
        pred.select("block_id", "cycles"), pred.select("block_id", "cycles_per_100"), test, members
    )
    return {
        "mape": mape(pred["cycles"], pred["cycles_per_100"]),
        "kendall_tau": kendall_tau(pred["cycles"], pred["cycles_per_100"]),
        "slices": dict(zip(by_slice["slice"], by_slice["mape"])),
        "slice_n": dict(zip(by_slice["slice"], by_slice["n"])),
    }


def simulation_rate(ctx: StepContext, space, default, tables, train_blocks, n: int = 4000) -> float:
    """Pairs per second of the engine on (train block, sampled table) pairs, as the simulations asset runs them."""
    ids = sorted(train_blocks)[: n // len(tables) + 1]
    sampled = [space.sampled_table(t.preset, t.seed, default) for t in tables]
    b = np.repeat(np.arange(len(ids)), len(sampled))[:n]
    t = np.tile(np.arange(len(sampled)), len(ids))[:n]
    t0 = time.perf_counter()
    ctx.engine.simulate_pairs([train_blocks[i] for i in ids], sampled, b, t)
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--budget", type=int, default=0, help="search simulations (0: DiffTune's dataset size)")
    parser.add_argument("--tune-steps", type=int, default=settings_for("full").tune.steps)
    args = parser.parse_args()
    settings = settings_for("full", {"tune.steps": args.tune_steps})
    ctx = StepContext(args.db, Engine(args.mcpu), settings)
    space, default, train_blocks = ctx.space()
    sampled = ctx.sampled_tables(space)
    train_frame, _ = ctx.blocks("train")
    test_frame, test_blocks = ctx.blocks("test")
    default_id, default_all = ctx.default_table()
    members = slices(test_frame.select("block_id", "n_insts", "asm"), ingestion.block_sources(args.db))
    measured = train_frame["cycles_per_100"].to_numpy()
    val = lambda t: ctx.score(t, "val")[0]  # noqa: E731
    blocks = [train_blocks[b] for b in train_frame["block_id"]]
    problem = Problem(engine=ctx.engine, blocks=blocks, measured=measured, default=default_all, score=val)
    rate = simulation_rate(ctx, space, default, sampled, train_blocks)
    n_sims = simulations.simulation_totals(args.db, [t.table_id for t in sampled])[0]
    budget = args.budget or n_sims
    dataset_seconds = n_sims / rate
    print(
        f"{args.mcpu}: {len(blocks)} train blocks, {n_sims} simulated pairs ({rate:.0f} pairs/s: "
        f"{dataset_seconds:.0f} s to simulate), search budget {budget}"
    )
    results = {
        "default": {
            **test_metrics(ctx, default_all, test_frame, test_blocks, members),
            "simulations": 0,
            "seconds": 0.0,
        }
    }
    (OUT / "tables").mkdir(parents=True, exist_ok=True)

    # DiffTune: the Ithemal-style LSTM and the table learned through it, as the full profile stored them.
    lstm = (
        simulations.surrogate_runs(args.db, args.mcpu, "ithemal")
        or simulations.surrogate_runs(args.db, args.mcpu, "ithemal-lstm")
    )[0]
    learned = tables.learned_through(args.db, args.mcpu, lstm["run_id"])
    note = json.loads(learned["note"])
    results["difftune_lstm"] = {
        **test_metrics(ctx, tables.load_table(args.db, learned["table_id"]), test_frame, test_blocks, members),
        "simulations": n_sims,
        "surrogate_heldout_mape": lstm["heldout_mape"],
        "surrogate_train_seconds": lstm["train_seconds"],
        "seconds": dataset_seconds + lstm["train_seconds"] + note["seconds"],
    }

    # The structured surrogate: same simulations, the profile's epochs.
    t0 = time.perf_counter()
    pairs = stored_pairs(ctx, space, default, sampled, list(train_blocks))
    model = StructuredSurrogate.create(list(space.keys), settings.structured, [], ctx.engine.resources())
    report = model.fit([train_blocks[b] for b in pairs.block_ids], pairs)
    problem.surrogate = SurrogateView(model.predictor(blocks), ParamSpace.create(model.row_keys, ctx.engine))
    learned_s, _ = SurrogateTuner(settings.tune).tune(default_all, problem)
    s_seconds = time.perf_counter() - t0
    results["structured"] = {
        **test_metrics(ctx, learned_s, test_frame, test_blocks, members),
        "simulations": n_sims,
        "surrogate_heldout_mape": report["heldout_mape"],
        "surrogate_train_seconds": report["train_seconds"],
        "seconds": dataset_seconds + s_seconds,
    }
    learned_s.to_json(OUT / "tables" / f"{args.mcpu}-structured.json")

    # Direct search on the engine, DiffTune's simulation budget.
    config = override(settings, {"search.budget": budget, "search.rounds": 3}).search
    t0 = time.perf_counter()
    learned_d, hist_d = DirectSearch(config).tune(default_all, problem)
    results["direct_search"] = {
        **test_metrics(ctx, learned_d, test_frame, test_blocks, members),
        "simulations": hist_d[-1]["simulations"],
        "seconds": time.perf_counter() - t0,
    }
    learned_d.to_json(OUT / "tables" / f"{args.mcpu}-direct.json")

    # Combined: the structured surrogate's table, then moves its gradient proposes and the engine accepts.
    t0 = time.perf_counter()
    learned_c, hist_c = DirectSearch(config, proposals="surrogate").tune(learned_s, problem)
    results["combined"] = {
        **test_metrics(ctx, learned_c, test_frame, test_blocks, members),
        "simulations": n_sims + hist_c[-1]["simulations"],
        "seconds": results["structured"]["seconds"] + time.perf_counter() - t0,
    }
    learned_c.to_json(OUT / "tables" / f"{args.mcpu}-combined.json")

    base = results["default"]["slices"]
    rows = []
    for name, r in results.items():
        apps = [s for s in base if s.startswith("app:") and r["slices"].get(s, 0) > base[s] + 1e-12]
        rows.append(
            {
                "method": name,
                "test_mape_pct": round(100 * r["mape"], 2),
                "kendall_tau": round(r["kendall_tau"], 3),
                "ml_kernels_mape_pct": round(100 * r["slices"].get("ml:all", float("nan")), 2),
                "other_mape_pct": round(100 * r["slices"].get("ml:none", float("nan")), 2),
                "apps_worse": len(apps),
                "simulations": r["simulations"],
                "wall_seconds": round(r["seconds"]),
            }
        )
    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
        print(table)
    (OUT / f"tuner_comparison-{args.mcpu}.json").write_text(
        json.dumps(
            {
                "mcpu": args.mcpu,
                "table": rows,
                "results": results,
                "budget": budget,
                "structured": asdict(settings.structured),
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    main()

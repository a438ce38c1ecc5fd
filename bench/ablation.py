"""Ablation of the extended model on a tuned warehouse, scored on test.

Adding: from each µarch's learned llvm-mca table, each mechanism alone, the
extended model's set, and it with move elimination, re-tuned by the direct search through the
real engine on the train split. Removing (``--extended``): from the µarch's newest table the pipeline
learned under the extended model, that table as it is, and each mechanism
turned off in turn, re-tuned the same way, and that table with no stall on a
length-changing prefix (``lcp_penalty`` 0) and with no limit on the instructions
predecoded a cycle (``predecode_width`` 16), neither re-tuned. ``--configs`` with
no names runs only the removals (the warehouse needs no llvm-mca table then).

    .venv/bin/python bench/ablation.py --warehouse W.duckdb --data ../shared/data \
        [--mcpu haswell skylake ivybridge] [--budget 60000] [--rounds 2] [--extended] [--out ablation.json]

W is a warehouse the ``full`` profile tuned; it is read, never written.
Reported per configuration: test MAPE and Kendall tau of the steady state (what
BHive measures), and the slices
``bottleneck:*`` (from W's block features), ``mem:store_load`` (a load reads
bytes a store wrote, at BHive-harness addresses), ``alias:bhive`` (BHive's own
may-alias list, with and without the harness model) and ``fe:above_16B``
(blocks the learned llvm-mca table, or with no ``--configs`` the extended one, runs above 16 bytes a cycle: mean signed
error).
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import polars as pl
from common import split_blocks

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.engine.extended import EXTENDED
from difftune_pipeline.engine.mechanisms import REQUIRES
from difftune_pipeline.model.metrics import kendall_tau, mape, signed_error
from difftune_pipeline.tuners.direct import search
from difftune_pipeline.tuners.search import SearchConfig
from difftune_pipeline.warehouse import connection, evaluation, tables

CONFIGS = {
    "llvm-mca (learned)": (),
    "+ front end": ("front_end",),
    "+ memory": ("memory",),
    "+ stack engine": ("stack_engine",),
    "+ move elimination": ("move_elimination",),
    "+ locked": ("locked",),
    "extended (front end, memory, stack engine)": EXTENDED,
    "extended + move elimination": (*EXTENDED, "move_elimination"),
}


def may_alias(data: Path | None) -> set[str]:
    """Hex of BHive's may-alias blocks (``bhive_may_alias.csv``: hex first)."""
    path = data / "bhive_may_alias.csv" if data else None
    if not path or not path.exists():
        return set()
    with open(path) as fh:
        return {row[0].strip().lower() for row in csv.reader(fh) if row and not row[0].startswith("#")}


def figures(pred: np.ndarray, ok: np.ndarray, truth: np.ndarray, masks: dict[str, np.ndarray]) -> dict:
    out = {}
    for name, mask in masks.items():
        m = mask & ok
        out[name] = {
            "n": int(m.sum()),
            "mape": mape(pred[m], truth[m]),
            "tau": kendall_tau(pred[m], truth[m]),
            "signed": signed_error(pred[m], truth[m]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--data", type=Path, default=None, help="for BHive's may-alias list")
    parser.add_argument("--mcpu", nargs="*", default=["haswell", "skylake", "ivybridge"])
    parser.add_argument("--budget", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--extended", action="store_true", help="also remove mechanisms from the extended table")
    parser.add_argument("--out", type=Path, default=Path("ablation.json"))
    args = parser.parse_args()
    db = args.warehouse
    aliasing_list = may_alias(args.data)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    for mcpu in args.mcpu:
        engine = Engine(mcpu)
        # the adding configurations start from llvm-mca's learned table; with none of them
        # asked for, the slices are those of the extended one
        learned_id, learned = _latest_learned(db, mcpu, extended=not args.configs)
        data = {s: split_blocks(engine, db, mcpu, s) for s in ("train", "val", "test")}
        all_blocks = [b for s in data.values() for b in s[1]]
        llvm = engine.default_table(all_blocks)
        t0 = time.perf_counter()
        found = {s: [harness.accesses(b, "bhive") for b in data[s][1]] for s in data}
        emulation = time.perf_counter() - t0
        attached = {s: [a.attach(b) for a, b in zip(found[s], data[s][1])] for s in data}
        symbolic_test = [harness.accesses(b, "none").attach(b) for b in data["test"][1]]
        ids, test_blocks, truth = data["test"]
        plain_test = engine.simulate(attached["test"] if "memory" in learned.mechanisms else test_blocks, learned)
        nbytes = np.array([sum(len(h) // 2 for h in b.encoding) for b in test_blocks])
        parent = connection.query("SELECT parent_id FROM param_tables WHERE table_id = ?", db, [learned_id]).item()
        bottleneck = dict(evaluation.bottlenecks(db, parent).iter_rows())
        store_load = np.array([_store_load(a) for a in found["test"]])
        hexes = [b.source[1] for b in test_blocks]
        masks = {
            "all": np.ones(len(ids), bool),
            "mem:store_load": store_load,
            "alias:bhive": np.array([h in aliasing_list for h in hexes]),
            "fe:above_16B": plain_test.ok & (nbytes * 100 / np.maximum(plain_test.steady, 1) > 16),
        }
        for kind in sorted(set(bottleneck.values())):
            masks[f"bottleneck:{kind}"] = np.array([bottleneck.get(b) == kind for b in ids])
        print(f"{mcpu}: {len(ids)} test blocks; emulation {1e3 * emulation / len(all_blocks):.2f} ms/block", flush=True)
        runs = [(name, CONFIGS[name], learned) for name in args.configs]
        if args.extended:
            _, ext = _latest_learned(db, mcpu, extended=True)
            runs.append(("extended (pipeline)", None, ext))
            # the mechanisms another needs go with it (bank conflicts, page walks, folded and forwarded loads,
            # DTLB misses: memory; the complex decoder: the front end)
            for m in ext.mechanisms:
                gone = [x for x in ext.mechanisms if x == m or m in REQUIRES.get(x, ())]
                runs.append((f"extended − {' − '.join(gone)}", tuple(x for x in ext.mechanisms if x not in gone), ext))
            if "front_end" in ext.mechanisms:  # the predecoder with no limit on instructions a cycle
                unlimited = ext.copy()
                unlimited.globals["predecode_width"] = 16
                runs.append(("extended − predecode width (not re-tuned)", None, unlimited))
            if "front_end" in ext.mechanisms:  # the pipeline's table with no stall on a length-changing prefix
                no_lcp = ext.copy()
                no_lcp.globals["lcp_penalty"] = 0
                runs.append(("extended − LCP stall (not re-tuned)", None, no_lcp))
        for name, mechanisms, origin in runs:
            key = f"{mcpu}/{name}"
            if key in results:
                continue
            if mechanisms is None:  # the table as the pipeline learned it
                mechanisms = origin.mechanisms
            start = origin.with_model(mechanisms, "bhive", llvm=llvm) if mechanisms else origin
            default = llvm.with_model(mechanisms, "bhive") if mechanisms else llvm
            blocks = attached if "memory" in mechanisms else {s: d[1] for s, d in data.items()}

            def score(t: ParamTable, engine=engine, val=blocks["val"], truth_val=data["val"][2]) -> float:
                r = engine.simulate(val, t)
                return mape(r.steady[r.ok], truth_val[r.ok])

            t1 = time.perf_counter()
            if start.mechanisms != origin.mechanisms or origin is learned and mechanisms:
                table, _ = search(
                    engine,
                    blocks["train"],
                    data["train"][2],
                    default,
                    score,
                    SearchConfig(budget=args.budget, rounds=args.rounds),
                    start=start,
                    log=lambda m: print("   ", m, flush=True),
                )
            else:
                table = start
            r = engine.simulate(blocks["test"], table)
            row = figures(r.steady, r.ok, truth, masks)
            if "memory" in mechanisms:  # the may-alias blocks without the harness model
                sym = table.with_model(table.mechanisms, "none")
                rs = engine.simulate(symbolic_test, sym)
                row["alias:bhive without harness"] = figures(rs.steady, rs.ok, truth, {"x": masks["alias:bhive"]})["x"]
            row["seconds"] = time.perf_counter() - t1
            row["globals"] = table.globals
            results[key] = row
            args.out.write_text(json.dumps(results, indent=1))
            a = row["all"]
            print(
                f"  {name:20s} test MAPE {100 * a['mape']:6.2f}%  tau {a['tau']:.3f}  "
                f"store_load {100 * row['mem:store_load']['mape']:6.2f}% ({row['mem:store_load']['n']})  "
                f"alias {100 * row['alias:bhive']['mape']:6.2f}% ({row['alias:bhive']['n']})  "
                f">16B signed {100 * row['fe:above_16B']['signed']:+6.2f}% ({row['fe:above_16B']['n']})",
                flush=True,
            )


def _latest_learned(db: str, mcpu: str, extended: bool) -> tuple[str, ParamTable]:
    """The newest table learned for ``mcpu`` under llvm-mca's model, or under the extended one."""
    for table_id in connection.query(
        "SELECT table_id FROM param_tables WHERE kind = 'learned' AND mcpu = ? ORDER BY created_at DESC", db, [mcpu]
    )["table_id"]:
        table = tables.load_table(db, table_id)
        if bool(table.mechanisms) == extended:
            return table_id, table
    raise SystemExit(f"no table learned for {mcpu} under {'the extended' if extended else 'llvm-mca'}'s model in {db}")


def _store_load(found: harness.Accesses) -> bool:
    stores = [(a, n) for _, _, a, n, s in found.rows if s]
    return any(not s and any(x < a + n and a < x + m for x, m in stores) for _, _, a, n, s in found.rows)


if __name__ == "__main__":
    pl.Config.set_tbl_rows(50)
    main()

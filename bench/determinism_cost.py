"""What determinism costs the surrogate's training, side by side in one run: the
structured surrogate trained on a warehouse's simulations, each in a fresh
process, as the pipeline trains it (2 threads, torch's deterministic algorithms,
MKL's reproducible code path, COMPATIBLE) and with those two left off (2 threads, torch's and
MKL's defaults); each twice, to show which gives the same weights twice.

    .venv/bin/python bench/determinism_cost.py --warehouse W [--uarch haswell] [--epochs 5]

W is a warehouse whose simulations are materialised (``make run``); it is only read.
"""

import argparse
import contextlib
import json
import subprocess
import sys

CHILD = """
import contextlib, hashlib, json, os, sys, time
free = sys.argv[4] == "free"
if free:
    os.environ["MKL_CBWR"] = "AUTO"  # before the package sets its default
import torch
from difftune_pipeline import steps
from difftune_pipeline.config import settings_for
from difftune_pipeline.engine import Engine
from difftune_pipeline.steps.surrogate import stored_pairs
from difftune_pipeline.surrogates import base, surrogate_type
if free:
    base.deterministic = lambda threads: contextlib.nullcontext(torch.set_num_threads(threads))
db, uarch, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = steps.StepContext(db, Engine(uarch), settings_for("sample", {"structured.epochs": epochs}))
space, default, train = ctx.space()
tables = ctx.sampled_tables(space)
pairs = stored_pairs(ctx, space, default, tables, list(train))
s = ctx.settings
model = surrogate_type("structured").create(list(space.keys), s.structured, list(train.values()),
                                            ctx.engine.resources(), space.globals, default.mechanisms)
report = model.fit([train[b] for b in pairs.block_ids], pairs, log=lambda *_: None, inputs_id="bench")
weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.model.state_dict().values())).hexdigest()
print(json.dumps({"seconds": report["train_seconds"], "pairs": report["n_train"], "weights": weights[:16],
                  "heldout_mape": report["heldout_mape"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--uarch", default="haswell")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for mode in ("deterministic", "free", "deterministic", "free"):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, args.warehouse, args.uarch, str(args.epochs), mode],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append({"mode": mode, **json.loads(out.stdout.strip().splitlines()[-1])})
        print(json.dumps(rows[-1]))
    seconds = {m: [r["seconds"] for r in rows if r["mode"] == m] for m in ("deterministic", "free")}
    same = {m: len({r["weights"] for r in rows if r["mode"] == m}) == 1 for m in seconds}
    print(f"pairs trained on: {rows[0]['pairs']:,}, epochs: {args.epochs}")
    for m, s in seconds.items():
        print(f"{m:>13}: {min(s):.1f} s (best of 2), the same weights twice: {same[m]}")
    with contextlib.suppress(ZeroDivisionError):
        print(f"time deterministic / free: {min(seconds['deterministic']) / min(seconds['free']):.2f}")


if __name__ == "__main__":
    main()

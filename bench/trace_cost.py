"""What recording events costs: the engine's simulation with recording off
against the engine of another commit (default: the one before traces existed),
and traces (recording on), side by side in one run; also ``Engine.simulate``
from Python, table compilation included.

    .venv/bin/python bench/trace_cost.py [--baseline 27c031d] [--blocks 500] [--rounds 5] [--data ../shared/data]

The baseline is checked out into a temporary git worktree and its extension built
as a wheel (about a minute); each round times both engines in fresh processes,
alternating, on the same blocks, one thread each. Prints the median blocks/s.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from common import ROOT, add_data_argument, bhive_rows

# Run in a fresh process against one checkout: blocks/s of simulate() (and of trace()).
TIMING = """
import json, sys, time
if sys.argv[4] == "1":  # another checkout: bypass the editable install's finder, which serves this tree
    sys.meta_path = [f for f in sys.meta_path if not type(f).__module__.startswith("_editable_")]
    sys.path.insert(0, sys.argv[1])
import difftune_pipeline
assert difftune_pipeline.__file__.startswith(sys.argv[1]), difftune_pipeline.__file__
from difftune_pipeline.engine import Engine
hexes, mcpu, trace = json.loads(sys.stdin.read()), sys.argv[2], sys.argv[3] == "1"
engine = Engine(mcpu)
blocks = [engine.parse_asm("\\n".join(b.asm)) for b in engine.disassemble_many(hexes)]
table, n = engine.compile(None), len(blocks)
t = time.perf_counter()
cycles = engine._native.simulate(blocks, [table], list(range(n)), [0] * n, 100, 1, 10_000_000, False)[0]
native = time.perf_counter() - t
t = time.perf_counter(); engine.simulate(blocks, threads=1); whole = time.perf_counter() - t
out = {"off": n / native, "whole": n / whole, "cycles": list(cycles)}
if trace:
    t = time.perf_counter(); traced = [engine.trace(b).cycles for b in blocks]; on = time.perf_counter() - t
    out.update(on=len(blocks) / on, traced=[c if c is not None else -1 for c in traced])
print(json.dumps(out))
"""


def build_baseline(ref: str, where: Path) -> Path:
    """``ref`` checked out under ``where`` with its extension built (as a wheel, the
    way ``make setup`` builds it) and placed in the checkout."""
    tree = where / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref], check=True)
    wheels = where / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
        check=True,
        env={**os.environ, "LLVM_CONFIG": os.environ.get("LLVM_CONFIG", "/usr/lib/llvm-19/bin/llvm-config")},
    )
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (so,) = [n for n in zf.namelist() if n.startswith("difftune_pipeline/engine/_engine")]
        (tree / so).write_bytes(zf.read(so))
    return tree


def timed(tree: Path, hexes: list[str], mcpu: str, trace: bool) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", TIMING, str(tree), mcpu, "1" if trace else "0", "0" if tree == ROOT else "1"],
        input=json.dumps(hexes),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="27c031d", help="commit whose engine is the reference speed")
    parser.add_argument("--blocks", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mcpu", default="haswell")
    add_data_argument(parser)
    args = parser.parse_args()
    hexes = [h for h, _ in bhive_rows(args.mcpu, args.blocks, args.data)]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            print(f"building the engine of {args.baseline} ...", flush=True)
            baseline = build_baseline(args.baseline, Path(tmp))
            now, before = [], []
            for _ in range(args.rounds):
                now.append(timed(ROOT, hexes, args.mcpu, trace=True))
                before.append(timed(baseline, hexes, args.mcpu, trace=False))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "baseline")])
    assert all(r["cycles"] == before[0]["cycles"] for r in now + before), "engines disagree on cycles"
    assert all(r["traced"] == r["cycles"] for r in now), "trace cycles differ from simulate"
    median = {
        (who, k): statistics.median(r[k] for r in rs)
        for who, rs in (("now", now), ("before", before))
        for k in ("off", "whole", "on")
        if k in rs[0]
    }
    off, base = median["now", "off"], median["before", "off"]
    print(f"{len(hexes)} blocks, -mcpu={args.mcpu}, 100 iterations, 1 thread, median of {args.rounds} rounds")
    print("the engine's simulate (C++, table compiled beforehand):")
    print(f"  baseline {args.baseline}          : {base:8.1f} blocks/s")
    print(f"  this tree, recording off  : {off:8.1f} blocks/s   ratio to baseline {off / base:.3f}")
    print(
        f"  this tree, trace (recording on, one call per block): {median['now', 'on']:8.1f} blocks/s   "
        f"ratio to recording off {median['now', 'on'] / off:.3f}"
    )
    print("Engine.simulate from Python (compiling LLVM's table included):")
    print(f"  baseline {median['before', 'whole']:8.1f} blocks/s, this tree {median['now', 'whole']:8.1f} blocks/s")
    print("identical cycles: baseline, recording off and recording on")


if __name__ == "__main__":
    main()

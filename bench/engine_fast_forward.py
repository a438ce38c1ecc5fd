"""Opt-in steady-state fast-forward against full simulation: speed-up and the
share of blocks whose cycles come out exactly equal.

    .venv/bin/python bench/engine_fast_forward.py [--blocks N] [--mcpu haswell] [--data ../shared/data]
"""

import argparse
import time

import numpy as np
from common import add_data_argument, bhive_blocks

from difftune_pipeline.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=None)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--iterations", type=int, default=100)
    add_data_argument(parser)
    args = parser.parse_args()
    engine = Engine(args.mcpu)
    blocks = bhive_blocks(engine, args.blocks, args.data)
    engine.compile(None)
    t0 = time.perf_counter()
    full = engine.simulate(blocks, threads=2, iterations=args.iterations).cycles
    t_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = engine.simulate(blocks, threads=2, iterations=args.iterations, fast_forward=True).cycles
    t_fast = time.perf_counter() - t0
    ok = full >= 0
    exact = int(np.sum(full[ok] == fast[ok]))
    rel = np.abs(fast[ok] - full[ok]) / full[ok]
    print(f"{ok.sum()} blocks, -mcpu={args.mcpu}, {args.iterations} iterations, 2 threads")
    print(
        f"full simulation: {ok.sum() / t_full:8.1f} blocks/s; fast-forward: {ok.sum() / t_fast:8.1f} blocks/s; "
        f"speed-up {t_full / t_fast:.2f}x"
    )
    print(
        f"exactly equal: {exact}/{ok.sum()} ({100 * exact / ok.sum():.2f}%); "
        f"mean |error| {100 * rel.mean():.4f}%, max {100 * rel.max():.2f}%"
    )
    print(
        "default: "
        + (
            "fast-forward qualifies (>= 99.5% exact)"
            if exact / ok.sum() >= 0.995
            else "full simulation (fast-forward is under 99.5% exact)"
        )
    )


if __name__ == "__main__":
    main()

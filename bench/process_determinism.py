"""Do fresh processes predict the same bits? Each of ``--processes`` new
processes per MKL branch loads the warehouse's surrogate and predicts every
train block at LLVM's table, 512 blocks a batch, as the gradient's anchor
does; the bench counts the distinct answers per branch.

    .venv/bin/python bench/process_determinism.py --db WAREHOUSE --mcpu ivybridge [--profile full]

``MKL_CBWR=COMPATIBLE`` is what the package sets (``determinism.py``); under
``AUTO,STRICT`` a process now and then computed one thread's half of its first
batch in other last bits, which the gradient's Adam turns into other tables.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import subprocess
import sys

BRANCHES = ("AUTO,STRICT", "COMPATIBLE")


def predict(db: str, mcpu: str, profile: str) -> str:
    """The hash of the surrogate's train predictions at LLVM's table, in this process."""
    import numpy as np

    from difftune_pipeline import steps
    from difftune_pipeline.config import settings_for
    from difftune_pipeline.determinism import deterministic
    from difftune_pipeline.engine import Engine
    from difftune_pipeline.steps.learned_params import _surrogate_view
    from difftune_pipeline.steps.surrogate import latest_surrogate
    from difftune_pipeline.tuners.base import predict_batched

    settings = settings_for(profile)
    ctx = steps.StepContext(db, Engine(mcpu), settings)
    _, default = ctx.default_table()
    view = _surrogate_view(ctx, latest_surrogate(ctx))
    frame, _ = ctx.blocks("train")
    with deterministic(settings.surrogate_config.threads):
        cycles = predict_batched(view.predict, *view.space.encode(default), np.arange(len(frame))).numpy()
    return hashlib.sha256(cycles.tobytes()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--mcpu", default="haswell")
    parser.add_argument("--profile", default="sample")
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(predict(args.db, args.mcpu, args.profile))
        return
    child = [sys.executable, __file__, "--child", "--db", args.db, "--mcpu", args.mcpu, "--profile", args.profile]
    for branch in BRANCHES:
        env = {**os.environ, "MKL_CBWR": branch}
        answers = collections.Counter(
            subprocess.run(child, env=env, capture_output=True, text=True, check=True).stdout.split()[-1]
            for _ in range(args.processes)
        )
        common = answers.most_common(1)[0][1]
        print(
            f"MKL_CBWR={branch}: {len(answers)} distinct answers in {args.processes} processes, "
            f"{args.processes - common} unlike the commonest"
        )


if __name__ == "__main__":
    main()

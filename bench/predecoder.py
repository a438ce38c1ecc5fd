"""The predecoder's instructions per cycle on BHive's blocks: LLVM's values under
the extended model with ``predecode_width`` at its default (5), at 6 and at 16 (no
instruction limit: the aligned 16-byte blocks alone), side by side, per CPU: MAPE
and mean signed error of the steady state on all blocks, and on the blocks whose
prediction the limit changes (5 against 16).

    .venv/bin/python bench/predecoder.py --data ../shared/data [--mcpu haswell ivybridge skylake] \\
        [--skip 1000] [--blocks 3000]
"""

from dataclasses import replace

import numpy as np
from common import windows

from difftune_pipeline.engine import extended


def main() -> None:
    for mcpu, engine, blocks, truth in windows(lambda m: "front_end" in extended.for_cpu(m)):
        default = engine.default_table(blocks).with_model(extended.for_cpu(mcpu), "bhive")
        tables = [default] + [replace(default, globals={**default.globals, "predecode_width": w}) for w in (6, 16)]
        steady = {
            f"predecode_width {t.globals['predecode_width']:2d}": engine.simulate(blocks, t).predicted("steady")
            for t in tables
        }
        ok = np.logical_and.reduce([np.isfinite(s) for s in steady.values()])  # simulated every way
        first, *_, last = steady.values()
        changed = np.not_equal(first[ok], last[ok])
        print(f"{mcpu}: {ok.sum()} blocks, {changed.sum()} changed by the limit")
        for label, predicted in steady.items():
            error = (predicted[ok] - truth[ok]) / truth[ok]
            print(
                f"  {label}  all {100 * np.abs(error).mean():5.2f}% (signed {100 * error.mean():+.2f}%); "
                f"changed {100 * np.abs(error[changed]).mean():5.2f}% ({100 * error[changed].mean():+.2f}%)",
                flush=True,
            )


if __name__ == "__main__":
    main()

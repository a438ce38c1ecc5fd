"""Partial-register writes on BHive's blocks: the error of LLVM's values under
the extended model, with and without the ``partial_register`` mechanism, on the
blocks it changes (an instruction that writes the low 8 or 16 bits of a
general-purpose register without reading it or loading) and on all blocks, per CPU,
and how many of the changed blocks it brings closer to the measurement.

    .venv/bin/python bench/partial_registers.py --data ../shared/data [--mcpu ivybridge haswell skylake] \\
        [--skip 1000] [--blocks 3000]
"""

import numpy as np
from common import windows

from difftune_pipeline.engine import extended


def main() -> None:
    for mcpu, engine, blocks, truth in windows():
        llvm = engine.default_table(blocks)
        without = llvm.with_model(tuple(m for m in extended.for_cpu(mcpu) if m != "partial_register"), "bhive")
        with_ = without.with_model((*without.mechanisms, "partial_register"), "bhive")
        steady = {
            label: engine.simulate(blocks, table).predicted("steady")
            for label, table in (("without partial_register", without), ("with partial_register", with_))
        }
        ok = np.logical_and(*(np.isfinite(s) for s in steady.values()))  # simulated both ways
        errors = {label: (s[ok] - truth[ok]) / truth[ok] for label, s in steady.items()}
        changed = np.not_equal(*(s[ok] for s in steady.values()))
        off, on = (np.abs(e[changed]) for e in errors.values())
        print(
            f"{mcpu}: {ok.sum()} blocks, {changed.sum()} changed by the mechanism: "
            f"{np.sum(on < off - 0.02)} closer to the measurement, {np.sum(on > off + 0.02)} further (by 2 points)"
        )
        for label, error in errors.items():
            print(
                f"  {label:26s} all {100 * np.abs(error).mean():5.2f}% (signed {100 * error.mean():+.2f}%); "
                f"changed {100 * np.abs(error[changed]).mean():5.2f}% ({100 * error[changed].mean():+.2f}%)",
                flush=True,
            )


if __name__ == "__main__":
    main()

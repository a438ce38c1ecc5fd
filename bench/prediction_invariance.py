"""A fingerprint of what the engine predicts: for each CPU, the cycles of the first
300 blocks of the bundled sample under LLVM's model, the extended model, and the
extended model with each mechanism it leaves to ``auto``, and the mechanisms'
defaults. Run it at two commits and compare the output: a change that should not
change a prediction (a refactoring) leaves every line the same.

    .venv/bin/python bench/prediction_invariance.py > after.txt
"""

import csv
import hashlib

from difftune_pipeline import harness
from difftune_pipeline.config import SAMPLE_DIR
from difftune_pipeline.engine import Engine, extended

BLOCKS = 300
CPUS = {  # CPU -> the mechanisms added to ``extended`` one at a time
    "haswell": ("locked", "move_elimination"),
    "ivybridge": ("locked", "move_elimination"),
    "skylake": ("locked", "move_elimination"),
    "znver1": (),
    "broadwell": ("locked",),
    "btver2": None,  # no generation: LLVM's model only
}


def digest(value) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:12]


def main() -> None:
    with open(SAMPLE_DIR / "bhive_hsw_sample.csv") as f:
        hexes = [row[0] for row in csv.reader(f)][:BLOCKS]
    for mcpu, added in CPUS.items():
        engine = Engine(mcpu)
        name = extended.harness_for(mcpu)
        blocks = [harness.accesses(b, name).attach(b) for b in engine.disassemble_many(hexes) if b.ok]
        llvm = engine.default_table(blocks)
        tables = {"plain": llvm}
        if added is not None:
            own = extended.for_cpu(mcpu)
            tables["extended"] = llvm.with_model(own, name)
            tables |= {f"+{m}": llvm.with_model((*own, m), name) for m in added}
        for label, table in tables.items():
            result = engine.simulate(blocks, table)
            print(f"{mcpu}/{label}", digest((result.cycles.tolist(), table.fingerprint())))
        if added is not None:
            print(f"{mcpu}/defaults", digest(sorted(extended.defaults(mcpu, extended.for_cpu(mcpu)).items())))


if __name__ == "__main__":
    main()

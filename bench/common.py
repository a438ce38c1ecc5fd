"""Shared by the benchmarks: BHive's measured files and corpus, from ``--data``
(a folder laid out like BHive's release, e.g. ../shared/data) or, without it, the
rows bundled in the repository (2,000 Haswell blocks; 100 each for Skylake and
Ivy Bridge; the sample corpus)."""

import argparse
import csv
import time
from pathlib import Path

import numpy as np

from difftune_pipeline import harness
from difftune_pipeline.config import SAMPLE_DIR
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.metrics import scored
from difftune_pipeline.steps.context import SPLITS
from difftune_pipeline.tuners.direct import search
from difftune_pipeline.tuners.search import SearchConfig
from difftune_pipeline.warehouse import ingestion

ROOT = Path(__file__).resolve().parents[1]
GROUND_TRUTH = {"haswell": "bhive_hsw.csv", "ivybridge": "bhive_ivb.csv", "skylake": "bhive_skl.csv"}
BUNDLED = {
    "haswell": SAMPLE_DIR / "bhive_hsw_sample.csv",
    "ivybridge": ROOT / "tests" / "data" / "bhive_ivb_100.csv",
    "skylake": ROOT / "tests" / "data" / "bhive_skl_100.csv",
}


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="folder with ground_truth/bhive_{hsw,ivb,skl}.csv and bhive_sources/*.csv "
        "(e.g. ../shared/data); default: the small sample bundled in the repository",
    )


def add_cpus_arguments(parser: argparse.ArgumentParser, blocks: int | None) -> None:
    """``--blocks`` (the first N rows of each file; None: all), ``--mcpu`` (default:
    every CPU with a BHive file) and ``--data``."""
    parser.add_argument("--blocks", type=int, default=blocks)
    parser.add_argument("--mcpu", nargs="*", default=list(GROUND_TRUTH))
    add_data_argument(parser)


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    """``add_cpus_arguments`` (3,000 blocks) and ``--skip``: a window of each file."""
    add_cpus_arguments(parser, 3000)
    parser.add_argument("--skip", type=int, default=1000, help="start after this many rows of each file")


def windows(wanted=lambda mcpu: True):
    """The command line's windows (``add_window_arguments``): for each CPU ``wanted``,
    (mcpu, its engine, the window's blocks with BHive's addresses, their measurements)."""
    parser = argparse.ArgumentParser()
    add_window_arguments(parser)
    args = parser.parse_args()
    for mcpu in filter(wanted, args.mcpu):
        engine = Engine(mcpu)
        yield mcpu, engine, *harnessed_window(engine, args)


def timed_cpus(args: argparse.Namespace):
    """For each CPU of ``add_cpus_arguments``: (mcpu, the time it started, its engine,
    its BHive blocks, disassembled from hex)."""
    for mcpu in args.mcpu:
        t0 = time.perf_counter()
        engine = Engine(mcpu)
        yield mcpu, t0, engine, bhive_blocks(engine, args.blocks, args.data)


def harnessed_window(engine, args: argparse.Namespace) -> tuple[list, np.ndarray]:
    """The blocks of the window ``--skip``/``--blocks`` of BHive's file for the
    engine's CPU that disassemble, with BHive's harness addresses, and their measurements."""
    rows = bhive_rows(engine.mcpu, args.skip + args.blocks, args.data)[args.skip :]
    blocks, truth = [], []
    for (_, cycles), block in zip(rows, engine.disassemble_many([h for h, _ in rows])):
        if block.ok:
            blocks.append(harness.accesses(block, "bhive").attach(block))
            truth.append(cycles)
    return blocks, np.array(truth)


def bhive_blocks(engine, n: int | None = None, data: Path | None = None) -> list:
    """The first ``n`` blocks of BHive's file for the engine's CPU, disassembled."""
    return engine.disassemble_many([h for h, _ in bhive_rows(engine.mcpu, n, data)])


def reassembled(engine, blocks: list) -> list:
    """Blocks parsed back from their AT&T text: the input the engine and the
    ``llvm-mca`` binary both read, for comparing them on identical instructions."""
    return [engine.parse_asm("\n".join(b.asm)) for b in blocks]


def _need(path: Path) -> Path:
    if not path.exists():
        raise SystemExit(f"{path} is missing: --data must hold BHive's ground_truth/ and bhive_sources/ folders")
    return path


def bhive_rows(mcpu: str, n: int | None = None, data: Path | None = None) -> list[tuple[str, float]]:
    """(hex, cycles per 100 iterations) of BHive's file for ``mcpu``, the first ``n``."""
    path = BUNDLED[mcpu] if data is None else _need(Path(data) / "ground_truth" / GROUND_TRUTH[mcpu])
    with open(path) as fh:
        rows = [(h, float(c)) for h, c in csv.reader(fh)]
    return rows[:n] if n else rows


def corpus_files(data: Path | None = None) -> list[Path]:
    """BHive's corpus files (``hex,frequency`` per application)."""
    folder = SAMPLE_DIR / "corpus" if data is None else _need(Path(data) / "bhive_sources")
    return sorted(folder.glob("*.csv"))


def split_blocks(engine: Engine, db: str, mcpu: str, split: str) -> tuple[list[str], list, np.ndarray]:
    frame = ingestion.measured_blocks(db, mcpu, [split])
    blocks = engine.disassemble_many(frame["hex"].to_list())
    return frame["block_id"].to_list(), blocks, frame["cycles_per_100"].to_numpy()


class Splits:
    """A tuned warehouse's train, val and test blocks of one µarch, with the
    addresses of a harness model, for the search benches: a table scored on a
    split, and the direct search on train selected on val."""

    def __init__(self, engine: Engine, db: str, mcpu: str, harness_name: str):
        self.engine = engine
        data = {s: split_blocks(engine, db, mcpu, s) for s in SPLITS}
        self.blocks = {s: [harness.accesses(b, harness_name).attach(b) for b in d[1]] for s, d in data.items()}
        self.measured = {s: d[2] for s, d in data.items()}

    def default(self, mechanisms=(), harness_name: str = "none") -> ParamTable:
        """LLVM's table over every split's rows, under the given mechanisms."""
        table = self.engine.default_table([b for blocks in self.blocks.values() for b in blocks])
        return table.with_model(mechanisms, harness_name) if mechanisms else table

    def scored(self, table: ParamTable, split: str) -> tuple[float, float]:
        """(MAPE, Kendall tau) of ``table`` on ``split``, over the blocks it simulates."""
        return scored(self.engine.simulate(self.blocks[split], table), self.measured[split])

    def search(self, default: ParamTable, config: SearchConfig, start: ParamTable | None = None) -> ParamTable:
        """The direct search on train from ``start`` (default: ``default``), the best round on val."""
        table, _ = search(
            self.engine,
            self.blocks["train"],
            self.measured["train"],
            default,
            lambda t: self.scored(t, "val")[0],
            config,
            start=start,
            log=lambda *_: None,
        )
        return table

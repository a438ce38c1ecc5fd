"""What every step works in: the warehouse, the engine of one µarch, the
settings, and the views of the warehouse the steps read — each read from the
warehouse and disassembled once per context."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from difftune_pipeline.config import Settings
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.metrics import kendall_tau, mape
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.model.sampling import SampledTable, sampled_tables
from difftune_pipeline.warehouse import queries

SPLITS = ("train", "val", "test")

# Bump when a step's code changes what it produces: results of older code are not reused.
CODE_VERSIONS = {
    "default_params": "1",
    "features": "1",
    "sampled_tables": "1",
    "simulations": "1",
    "surrogate": "2",
    "learned_params": "2",
    "evaluation": "2",
}


def fingerprint(*parts) -> str:
    """A step's result key: what it read, how it was configured, its code version."""
    text = json.dumps(
        parts, sort_keys=True, default=lambda x: asdict(x) if hasattr(x, "__dataclass_fields__") else str(x)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class StepContext:
    db: str
    engine: Engine
    settings: Settings
    _views: dict = field(default_factory=dict, repr=False)

    @property
    def uarch(self) -> str:
        return self.engine.mcpu

    @property
    def models_dir(self) -> Path:
        path = Path(self.db).resolve().parent / "models"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def blocks(self, split: str) -> tuple[pl.DataFrame, dict]:
        """The measured blocks of a split (frame ordered by block id) and block_id -> engine Block."""
        if split not in self._views:
            frame = queries.measured_blocks(self.db, self.uarch, [split])
            blocks = dict(zip(frame["block_id"].to_list(), self.engine.disassemble_many(frame["hex"].to_list())))
            self._views[split] = frame, blocks
        return self._views[split]

    def space(self) -> tuple[ParamSpace, ParamTable, dict]:
        """The parameter space of the train blocks (the rows they use, variant
        resolutions included), LLVM's table over them, and the train blocks."""
        if "space" not in self._views:
            _, train = self.blocks("train")
            if not train:
                raise ValueError(f"no measured {self.uarch} blocks in the train split: ingest measurements first")
            default = self.engine.default_table(list(train.values()))
            keys = {k for b in train.values() for k in b.row_keys if k in default.rows}
            self._views["space"] = ParamSpace.create(keys, self.engine, default.global_names()), default
        space, default = self._views["space"]
        return space, default, self.blocks("train")[1]

    def sampled_tables(self, space: ParamSpace) -> list[SampledTable]:
        return sampled_tables(space, self.uarch, self.settings.presets, self.settings.tables_per_preset)

    def default_table(self) -> tuple[str, ParamTable]:
        """LLVM's table over every measured block, and its id."""
        if "default" not in self._views:
            blocks = [b for split in SPLITS for b in self.blocks(split)[1].values()]
            table = self.engine.default_table(blocks)
            self._views["default"] = f"default-{self.uarch}-{table.fingerprint()}", table
        return self._views["default"]

    def score(self, table: ParamTable, split: str) -> tuple[float, float | None]:
        """Engine MAPE and Kendall tau (None where undefined) of ``table`` on the measured blocks of ``split``."""
        frame, blocks = self.blocks(split)
        result = self.engine.simulate(
            [blocks[b] for b in frame["block_id"]], table, iterations=self.settings.iterations
        )
        pred, truth = result.cycles[result.ok], frame["cycles_per_100"].to_numpy()[result.ok]
        return mape(pred, truth), kendall_tau(pred, truth)

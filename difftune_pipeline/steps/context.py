"""What every step works in: the warehouse, the engine of one µarch, the
settings, and the views of the warehouse the steps read — each read from the
warehouse and disassembled once per context."""

from __future__ import annotations

import collections
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from difftune_pipeline import harness
from difftune_pipeline.config import Settings
from difftune_pipeline.engine import Engine, ParamTable, extended
from difftune_pipeline.model.metrics import helps_where_it_changes, scored
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.model.sampling import SampledTable, sampled_tables
from difftune_pipeline.warehouse import harness_records, ingestion, simulation_files, tables

SPLITS = ("train", "val", "test")

# Bump when a step's code changes what it produces, or the engine what it simulates for every
# model (the steady state): results of older code are not reused.
CODE_VERSIONS = {
    "accesses": "2",
    "default_params": "12",
    "features": "5",
    "sampled_tables": "2",
    "simulations": "5",
    "surrogate": "18",
    "learned_params": "29",
    "evaluation": "11",
}

# The settings each step reads (through the context's views too), beside its code:
# a change of one re-runs the steps that read it and no other.
_SIMULATOR = ("model", "harness", "iterations", "measure")
_SAMPLED = (*_SIMULATOR, "presets", "tables_per_preset", "blocks_per_table")
_SURROGATE = ("surrogate_model", "lstm", "structured")
SETTINGS_READ = {
    "accesses": _SIMULATOR,
    "default_params": _SIMULATOR,
    "features": _SIMULATOR,
    "sampled_tables": _SAMPLED,
    "simulations": (*_SAMPLED, "shards"),
    "surrogate": (*_SAMPLED, *_SURROGATE, "max_surrogate_heldout_mape"),
    "learned_params": (*_SIMULATOR, *_SURROGATE, "tuner", "tune", "search", "prune"),
    "evaluation": _SIMULATOR,
}


def step_version(step: str, settings: Settings) -> str:
    """A step's code version with the settings it reads: the same string while
    neither changes (Dagster's code version of the step's asset)."""
    return f"{CODE_VERSIONS[step]}-{fingerprint(*(getattr(settings, name) for name in SETTINGS_READ[step]))}"


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
    simulations: str = ""  # the simulations' dataset folder or URI; empty: beside the warehouse
    _views: dict = field(default_factory=dict, repr=False)

    @property
    def uarch(self) -> str:
        return self.engine.mcpu

    @property
    def simulation_root(self) -> str:
        return self.simulations or simulation_files.default_root(self.db)

    def chunk_writer(self, shard: str, iterations: int) -> simulation_files.ChunkWriter:
        """Writes this µarch's simulated chunks under ``shard``; paths resolved here
        (a Ray worker's working folder may be another)."""
        root = self.simulation_root
        root = root if "://" in root else str(Path(root).resolve())
        return simulation_files.ChunkWriter(
            root, str(Path(self.db).resolve()), self.uarch, self.engine.llvm_version, iterations, shard
        )

    @property
    def models_dir(self) -> Path:
        path = Path(self.db).resolve().parent / "models"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def blocks(self, split: str, attach: bool = True) -> tuple[pl.DataFrame, dict]:
        """The measured blocks of a split (frame ordered by block id) and block_id -> engine Block.
        ``attach``: with their loads' and stores' addresses under the harness model,
        when the model may simulate memory dependencies (recorded ones, else emulated here)."""
        if (split, attach) not in self._views:
            frame = ingestion.measured_blocks(self.db, self.uarch, [split])
            blocks = dict(zip(frame["block_id"].to_list(), self.engine.disassemble_many(frame["hex"].to_list())))
            if attach and self._may_use_memory():
                blocks = self._with_accesses(blocks)
            self._views[split, attach] = frame, blocks
        return self._views[split, attach]

    def _may_use_memory(self) -> bool:
        wanted = extended.parse(self.settings.model, self.uarch)
        return extended.supported(self.uarch) and (wanted is None or "memory" in wanted)

    @property
    def harness(self) -> str:
        """The harness model of the µarch's measurements: the ``harness`` setting,
        or with ``auto`` the one of the tool that measured it (extended.harness_for)."""
        if self.settings.harness == "auto":
            return extended.harness_for(self.uarch)
        return self.settings.harness

    def _with_accesses(self, blocks: dict) -> dict:
        name = self.harness
        status = harness_records.harness_status(self.db, name, list(blocks))
        rows: dict[str, list] = collections.defaultdict(list)
        for b, it, i, a, n, st in harness_records.harness_accesses(self.db, name, list(blocks)).iter_rows():
            rows[b].append((it, i, a, n, st))
        stored = {b: harness.Accesses(addr, tuple(rows[b]), s) for b, addr, s in status.iter_rows()}
        return {b: (stored.get(b) or harness.accesses(block, name)).attach(block) for b, block in blocks.items()}

    def choose_model_on_val(self) -> tuple[tuple[str, ...], str, str]:
        """``model``, chosen now: with ``auto``, every candidate model's default table
        is simulated on val (what ``default_params`` does; the steps after it read
        its choice from the warehouse)."""
        return self.model(_choose=True)

    def model(self, _choose: bool = False) -> tuple[tuple[str, ...], str, str]:
        """(mechanisms, harness, why): the simulator the steps use, from the
        ``model`` setting. ``auto`` takes the model whose default table scores best
        on val: llvm-mca's, the extended one, or the extended one without a mechanism
        only its generation has, as ``default_params`` chose it; where it has not
        chosen yet, it is chosen on val now (``choose_model_on_val``)."""
        if "model" not in self._views:
            name = self.harness
            wanted = extended.parse(self.settings.model, self.uarch)
            stored = None if _choose or wanted is not None else tables.latest_default_model(self.db, self.uarch)
            if not extended.supported(self.uarch):
                chosen = (), f"llvm-mca: the extended model has no rules for {self.uarch}"
            elif wanted is not None:
                chosen = wanted, f"the model setting ({self.settings.model})"
            elif stored is not None:
                chosen = stored[1], f"auto: as default_params chose ({stored[0]})"
            else:
                llvm, candidates = self.llvm_default(), extended.candidates(self.uarch)
                scores = {c: self.score(llvm.with_model(c, name) if c else llvm, "val")[0] for c in candidates}
                pick = min(scores, key=scores.get)  # a tie goes to the simpler model, listed first
                why = "auto: val MAPE of the default tables, " + ", ".join(
                    f"{candidates[c]} {v:.4f}" for c, v in scores.items()
                )
                chosen = self._with_optional(llvm, pick, name, why) if pick else (pick, why)
            self._views["model"] = (chosen[0], name, chosen[1])
        return self._views["model"]

    def _with_optional(self, llvm: ParamTable, base: tuple, name: str, why: str) -> tuple[tuple, str]:
        """``base`` with each mechanism ``extended`` leaves out that helps the train and
        val blocks whose prediction it changes, under LLVM's values; ``why`` with each verdict."""
        frames = [self.blocks(split) for split in ("train", "val")]
        blocks = [found[b] for frame, found in frames for b in frame["block_id"]]
        measured = np.concatenate([frame["cycles_per_100"].to_numpy() for frame, _ in frames])
        before = self._predicted(blocks, llvm.with_model(base, name))
        for mechanism in extended.optional(self.uarch):
            trial = extended.check((*base, mechanism), name)
            after = self._predicted(blocks, llvm.with_model(trial, name))
            helps, how = helps_where_it_changes(before, after, measured)
            why += f"; {mechanism} {'on' if helps else 'off'}: {how}"
            if helps:
                base, before = trial, after
        return base, why

    def _predicted(self, blocks: list, table: ParamTable) -> np.ndarray:
        """The engine's prediction of each block (NaN where it fails), fast-forwarded
        under the steady state as the search's train simulations are."""
        result = self.engine.simulate(
            blocks, table, iterations=self.settings.iterations, fast_forward=self.settings.measure == "steady"
        )
        return result.predicted_or_nan(self.settings.measure)

    def llvm_default(self) -> ParamTable:
        """LLVM's own table over every measured block (llvm-mca's model)."""
        if "llvm" not in self._views:
            blocks = [b for split in SPLITS for b in self.blocks(split)[1].values()]
            self._views["llvm"] = self.engine.default_table(blocks)
        return self._views["llvm"]

    def space(self) -> tuple[ParamSpace, ParamTable, dict]:
        """The parameter space of the train blocks (the rows they use, variant
        resolutions included), LLVM's table over them, and the train blocks."""
        if "space" not in self._views:
            _, train = self.blocks("train")
            if not train:
                raise ValueError(f"no measured {self.uarch} blocks in the train split: ingest measurements first")
            mechanisms, name, _ = self.model()
            default = self.engine.default_table(list(train.values()))
            default = default.with_model(mechanisms, name) if mechanisms else default
            keys = {k for b in train.values() for k in b.row_keys if k in default.rows}
            self._views["space"] = ParamSpace.create(keys, self.engine, default), default
        space, default = self._views["space"]
        return space, default, self.blocks("train")[1]

    def sampled_tables(self, space: ParamSpace) -> list[SampledTable]:
        return sampled_tables(space, self.uarch, self.settings.presets, self.settings.tables_per_preset)

    def llvm_mca_table(self) -> tuple[str, ParamTable]:
        """llvm-mca as shipped (LLVM's table under llvm-mca's own model) and its id:
        the default table itself when the chosen model is llvm-mca's."""
        default_id, default = self.default_table()
        if not default.mechanisms:
            return default_id, default
        llvm = self.llvm_default()
        return f"llvm-mca-{self.uarch}-{llvm.fingerprint()}", llvm

    def default_table(self) -> tuple[str, ParamTable]:
        """LLVM's table over every measured block, under the chosen model (``model``:
        chosen on val first where nothing chose it), and its id."""
        if "default" not in self._views:
            mechanisms, name, _ = self.model()
            table = self.llvm_default().with_model(mechanisms, name) if mechanisms else self.llvm_default()
            self._views["default"] = f"default-{self.uarch}-{table.fingerprint()}", table
        return self._views["default"]

    def score(self, table: ParamTable, split: str) -> tuple[float, float | None]:
        """Engine MAPE and Kendall tau (None where undefined) of ``table`` on the measured blocks of ``split``."""
        frame, blocks = self.blocks(split)
        result = self.engine.simulate(
            [blocks[b] for b in frame["block_id"]], table, iterations=self.settings.iterations
        )
        return scored(result, frame["cycles_per_100"].to_numpy(), self.settings.measure)

"""The DiffTune stages over the warehouse, each idempotent: a stage whose inputs,
configuration and code are unchanged finds its result stored and does no work.

Dagster assets (``defs/difftune.py``) call these; so can a notebook or script.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from difftune_pipeline import datasets, simulations, store
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.engine.table import diff
from difftune_pipeline.evaluate import kendall_tau, mape, metrics_by_slice, slices
from difftune_pipeline.features import features_frame
from difftune_pipeline.params import ParamSpace
from difftune_pipeline import structured
from difftune_pipeline.search import SearchConfig, gradient_proposer, search
from difftune_pipeline.structured import StructuredBlocks, StructuredConfig, StructuredSurrogate
from difftune_pipeline.surrogate import Surrogate, SurrogateConfig, train
from difftune_pipeline.tune import TuneConfig, gradient, tune

TUNERS = ("surrogate", "direct", "combined")

# Bump when a stage's code changes what it produces: results of older code are not reused.
CODE_VERSIONS = {"default_params": "1", "features": "1", "sampled_tables": "1", "simulations": "1", "surrogate": "2",
                 "learned_params": "2", "evaluation": "1"}


@dataclass
class Settings:
    presets: list[str] = field(default_factory=lambda: ["perturb", "difftune"])
    tables_per_preset: int = 24
    blocks_per_table: int = 0          # 0: every train block
    shards: int = 4
    iterations: int = 100
    surrogate_model: str = "structured"  # structured | ithemal
    surrogate: SurrogateConfig = field(default_factory=SurrogateConfig)      # the Ithemal-style LSTM
    structured: StructuredConfig = field(default_factory=StructuredConfig)
    tuner: str = "combined"              # surrogate | direct | combined (see Stage.learn)
    tune: TuneConfig = field(default_factory=TuneConfig)
    search: SearchConfig = field(default_factory=SearchConfig)


def fingerprint(*parts) -> str:
    """A stage's result key: what it read, how it was configured, its code version."""
    text = json.dumps(parts, sort_keys=True, default=lambda x: asdict(x) if hasattr(x, "__dataclass_fields__") else str(x))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class Stage:
    db: str
    engine: Engine
    settings: Settings
    _views: dict = field(default_factory=dict, repr=False)  # one stage call reads each view once

    @property
    def uarch(self) -> str:
        return self.engine.mcpu

    @property
    def models_dir(self) -> Path:
        path = Path(self.db).resolve().parent / "models"
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ---- shared views ------------------------------------------------------
    def blocks(self, split: str) -> tuple[pl.DataFrame, dict]:
        if split not in self._views:
            frame = datasets.measured_blocks(self.db, self.uarch, [split])
            self._views[split] = frame, datasets.disassemble(self.engine, frame)
        return self._views[split]

    def space(self):
        if "space" not in self._views:
            _, train_blocks = self.blocks("train")
            if not train_blocks:
                raise ValueError(f"no measured {self.uarch} blocks in the train split: ingest measurements first")
            self._views["space"] = datasets.parameter_space(self.engine, list(train_blocks.values()))
        space, default = self._views["space"]
        return space, default, self.blocks("train")[1]

    def tables(self, space) -> list[simulations.SampledTable]:
        return simulations.sampled_tables(space, self.uarch, self.settings.presets, self.settings.tables_per_preset)

    def default_table_id(self) -> tuple[str, ParamTable]:
        """LLVM's table over every measured block (built once per stage call)."""
        if "default" not in self._views:
            blocks = []
            for split in ("train", "val", "test"):
                blocks += list(self.blocks(split)[1].values())
            table = self.engine.default_table(blocks)
            self._views["default"] = f"default-{self.uarch}-{table.fingerprint()}", table
        return self._views["default"]

    # ---- stages ----------------------------------------------------------
    def default_params(self) -> dict:
        table_id, table = self.default_table_id()
        with store.writer(self.db) as con:
            new = store.save_table(con, table_id, table, kind="default", note="LLVM's scheduling model")
        return {"table_id": table_id, "rows": len(table.rows), "new": new}

    def features(self) -> dict:
        """Hardware features of every measured block under the default table (table ``block_features``)."""
        table_id, table = self.default_table_id()
        frames = [self.blocks(split) for split in ("train", "val", "test")]
        ids = [b for _, blocks in frames for b in blocks]
        done = set(store.query("SELECT block_id FROM block_features WHERE table_id = ?", self.db, [table_id])["block_id"])
        todo = [b for b in ids if b not in done]
        blocks = {b: blk for _, bl in frames for b, blk in bl.items()}
        frame = features_frame(todo, [blocks[b] for b in todo], table, self.engine.resources())
        with store.writer(self.db) as con:
            store.insert_new(con, "block_features", frame.with_columns(pl.lit(table_id).alias("table_id")),
                             ["block_id", "table_id"])
        counts = store.query("SELECT bottleneck, count(*) AS n FROM block_features WHERE table_id = ? GROUP BY 1 "
                             "ORDER BY n DESC", self.db, [table_id])
        return {"table_id": table_id, "blocks": len(ids), "new": len(todo), "by_bottleneck": counts}

    def sampled_tables(self) -> dict:
        space, default, _ = self.space()
        tables = self.tables(space)
        with store.writer(self.db) as con:
            new = sum(store.save_table(con, t.table_id, default, kind="sampled", preset=t.preset, seed=t.seed,
                                       space_id=space.fingerprint(), values=False) for t in tables)
        return {"space_id": space.fingerprint(), "rows": len(space.keys), "columns": space.width,
                "tables": len(tables), "new_tables": new}

    def simulate_shard(self, shard: int) -> dict:
        space, default, train_blocks = self.space()
        mine = [t for t in self.tables(space) if simulations.shard_of(t.table_id, self.settings.shards) == shard]
        t0 = time.perf_counter()
        stats = simulations.run_shard(self.db, self.engine, space, default, mine, train_blocks,
                                      self.settings.blocks_per_table, f"shard-{shard}", self.settings.iterations)
        elapsed = time.perf_counter() - t0
        return {**stats, "tables": len(mine), "seconds": round(elapsed, 1),
                "pairs_per_second": round(stats["simulated"] / elapsed, 1) if stats["simulated"] else 0.0}

    def _surrogate_id(self, space, tables) -> str:
        counts = store.query("SELECT count(*) AS n, sum(cycles) AS s FROM simulations WHERE status = 'ok' "
                             "AND table_id IN (SELECT unnest(?))", self.db, [[t.table_id for t in tables]])
        config = self.settings.structured if self.settings.surrogate_model == "structured" else self.settings.surrogate
        return "surrogate-" + fingerprint(CODE_VERSIONS["surrogate"], space.fingerprint(), counts.row(0),
                                          self.settings.surrogate_model, config, self.settings.iterations)

    def train_surrogate(self, log=print) -> dict:
        """Train the configured surrogate (``Settings.surrogate_model``) on the simulations."""
        space, default, train_blocks = self.space()
        tables = self.tables(space)
        run_id = self._surrogate_id(space, tables)
        done = store.query("SELECT * FROM surrogate_runs WHERE run_id = ?", self.db, [run_id])
        if not done.is_empty() and Path(done["checkpoint"][0]).exists():
            return {**done.row(0, named=True), "reused": True}
        kind = self.settings.surrogate_model
        if kind == "structured":
            pairs = datasets.simulated_pairs(self.db, space, default, tables, train_blocks, self.settings.iterations)
            if len(pairs.cycles) == 0:
                raise ValueError("no simulations to train on: materialise the simulations first")
            graphs = StructuredBlocks.build([train_blocks[b] for b in pairs.block_ids],
                                            {k: i for i, k in enumerate(space.keys)})
            model, report = structured.train(graphs, pairs.tables, pairs.globals_, pairs.block_idx, pairs.table_idx,
                                             pairs.cycles, list(space.keys), self.engine.resources(),
                                             self.settings.structured, log=log)
            config = self.settings.structured
        elif kind == "ithemal":
            vocab = datasets.vocabulary(list(train_blocks.values()))
            data = datasets.training_data(self.db, space, default, tables, train_blocks, vocab, self.settings.iterations)
            if len(data.cycles) == 0:
                raise ValueError("no simulations to train on: materialise the simulations first")
            model, report = train(data, vocab, list(space.keys), self.settings.surrogate, log=log)
            config = self.settings.surrogate
        else:
            raise ValueError(f"unknown surrogate model {kind!r}: structured or ithemal")
        path = self.models_dir / f"{run_id}.pt"
        model.save(path)
        row = {"run_id": run_id, "mcpu": self.uarch, "model": kind, "checkpoint": str(path),
               "n_train": report["n_train"], "n_heldout": report["n_heldout"],
               "heldout_mape": report["heldout_mape"], "heldout_kendall_tau": report["heldout_kendall_tau"],
               "train_seconds": report["train_seconds"], "config": json.dumps(asdict(config)),
               "created_at": datetime.now(timezone.utc).replace(tzinfo=None)}
        with store.writer(self.db) as con:
            store.insert_new(con, "surrogate_runs", pl.DataFrame([row]), ["run_id"])
        return {**row, "reused": False}

    def latest_surrogate(self) -> dict:
        """The newest trained surrogate of this µarch and the configured model.
        New measurements re-tune through it until the next full re-tune trains a new one."""
        runs = store.query("SELECT * FROM surrogate_runs WHERE mcpu = ? AND model = ? ORDER BY created_at DESC",
                           self.db, [self.uarch, self.settings.surrogate_model])
        for run in runs.iter_rows(named=True):
            if Path(run["checkpoint"]).exists():
                return run
        raise ValueError(f"no trained {self.settings.surrogate_model} surrogate for {self.uarch}: "
                         "materialise the surrogate first")

    def _predictor(self, run: dict, train_frame: pl.DataFrame, train_blocks: dict):
        """(space, predict) of a stored surrogate over the train blocks, in ``train_frame`` order."""
        blocks = [train_blocks[b] for b in train_frame["block_id"]]
        if run["model"] == "structured":
            model = StructuredSurrogate.load(run["checkpoint"])
            predict = model.predictor(model.tensors(blocks))
        else:
            model = Surrogate.load(run["checkpoint"])
            predict = model.predictor(model.tensors(datasets.block_inputs(blocks)))
        return ParamSpace.create(model.row_keys, self.engine.resources()), predict  # rows the surrogate knows

    def score(self, table: ParamTable, frame: pl.DataFrame, blocks: dict) -> tuple[float, float]:
        """Engine MAPE and Kendall tau of ``table`` on measured blocks."""
        result = self.engine.simulate([blocks[b] for b in frame["block_id"]], table, iterations=self.settings.iterations)
        truth = frame["cycles_per_100"].to_numpy()
        return mape(result.cycles[result.ok], truth[result.ok]), kendall_tau(result.cycles[result.ok], truth[result.ok])

    def learn(self, log=print) -> dict:
        """The learned table by the configured tuner (``Settings.tuner``):
        ``surrogate`` — gradient descent through the frozen surrogate (DiffTune);
        ``direct`` — coordinate search on the engine itself (``search.py``);
        ``combined`` — the surrogate's table as the start, then the search with
        moves the surrogate's gradient proposes and the engine accepts."""
        tuner = self.settings.tuner
        if tuner not in TUNERS:
            raise ValueError(f"unknown tuner {tuner!r}: one of {TUNERS}")
        run = self.latest_surrogate() if tuner != "direct" else None
        train_frame, train_blocks = self.blocks("train")
        val_frame, val_blocks = self.blocks("val")
        default_id, default = self.default_table_id()
        measurements = store.query("SELECT count(*) AS n, sum(cycles_per_100) AS s FROM measurements WHERE uarch = ?",
                                   self.db, [self.uarch]).row(0)
        table_id = f"learned-{self.uarch}-" + fingerprint(
            CODE_VERSIONS["learned_params"], run and run["run_id"], measurements, tuner,
            self.settings.tune if tuner != "direct" else None, self.settings.search if tuner != "surrogate" else None)
        if not store.query("SELECT 1 FROM param_tables WHERE table_id = ?", self.db, [table_id]).is_empty():
            return {"table_id": table_id, "reused": True}
        measured = train_frame["cycles_per_100"].to_numpy()
        val = lambda t: self.score(t, val_frame, val_blocks)[0]  # noqa: E731
        t0 = time.perf_counter()
        best, history, space_id = default, [], None
        if tuner in ("surrogate", "combined"):
            space, predict = self._predictor(run, train_frame, train_blocks)
            space_id = space.fingerprint()
            start = default
            if self.settings.tune.start == "random":
                start = space.sampled_table("difftune", self.settings.tune.seed, default)
            best, steps = tune(predict, train_frame.height, space, start, measured, val, self.settings.tune, log=log)
            history += [{"stage": "surrogate", **h} for h in steps]
        if tuner in ("direct", "combined"):
            proposer = None
            if tuner == "combined":
                columns = space.columns
                proposer = lambda table: gradient_proposer(  # noqa: E731
                    gradient(predict, train_frame.height, space, table, measured), columns,
                    halving=self.settings.search.halving)
            blocks = [train_blocks[b] for b in train_frame["block_id"]]
            best, rounds = search(self.engine, blocks, measured, default, val, self.settings.search,
                                  start=best, proposer=proposer, log=log)
            history += [{"stage": "search", **h} for h in rounds]
        seconds = time.perf_counter() - t0
        with store.writer(self.db) as con:
            store.save_table(con, table_id, best, kind="learned", parent_id=default_id, space_id=space_id,
                             note=json.dumps({"tuner": tuner, "surrogate": run and run["run_id"],
                                              "tune": asdict(self.settings.tune), "search": asdict(self.settings.search),
                                              "history": history, "seconds": seconds}))
        return {"table_id": table_id, "reused": False, "history": history,
                "changed_rows": len(best.changed_rows(default)), "seconds": seconds}

    def latest_learned(self) -> str:
        rows = store.query("SELECT table_id FROM param_tables WHERE kind = 'learned' AND mcpu = ? "
                           "ORDER BY created_at DESC LIMIT 1", self.db, [self.uarch])
        if rows.is_empty():
            raise ValueError(f"no learned table for {self.uarch}: materialise learned_params first")
        return rows["table_id"][0]

    def evaluate(self, table_ids: list[str]) -> pl.DataFrame:
        """Default and learned tables through the real engine on val and test:
        predictions and per-slice metrics, stored once per (table, µarch)."""
        (val_frame, val_blocks), (test_frame, test_blocks) = self.blocks("val"), self.blocks("test")
        frame, blocks = pl.concat([val_frame, test_frame]), {**val_blocks, **test_blocks}
        memberships = slices(frame.select("block_id", "n_insts", "asm"),
                             store.query("SELECT block_id, app FROM block_sources", self.db),
                             store.query("SELECT block_id, bottleneck FROM block_features WHERE table_id = ?",
                                         self.db, [self.default_table_id()[0]]))
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        for table_id in table_ids:
            if not store.query("SELECT 1 FROM evaluations WHERE table_id = ? AND uarch = ?", self.db,
                               [table_id, self.uarch]).is_empty():
                continue
            table = store.load_table(table_id, self.db)
            result = self.engine.simulate([blocks[b] for b in frame["block_id"]], table, iterations=self.settings.iterations)
            pred = pl.DataFrame({"table_id": table_id, "block_id": frame["block_id"], "iterations": self.settings.iterations,
                                 "cycles": [int(c) if ok else None for c, ok in zip(result.cycles, result.ok)],
                                 "status": result.status}, schema_overrides={"cycles": pl.Int64, "iterations": pl.Int32})
            metrics = metrics_by_slice(pred.select("block_id", "cycles"), frame.select("block_id", "cycles_per_100"),
                                       frame.select("block_id", "split"), memberships)
            with store.writer(self.db) as con:
                store.insert_new(con, "predictions", pred, ["table_id", "block_id", "iterations"])
                store.insert_new(con, "evaluations", metrics.with_columns(
                    pl.lit(table_id).alias("table_id"), pl.lit(self.uarch).alias("uarch"),
                    pl.lit(now).alias("evaluated_at")), ["table_id", "uarch", "split", "slice"])
        return store.query("SELECT * FROM evaluations WHERE uarch = ? AND table_id IN (SELECT unnest(?)) "
                           "ORDER BY split, slice, table_id", self.db, [self.uarch, table_ids])


def predicted_vs_measured(db, uarch: str, tables: dict[str, str], split: str = "test") -> pl.DataFrame:
    """block_id, measured and one column of engine cycles per named table (``{name: table_id}``)."""
    frame = datasets.measured_blocks(db, uarch, [split]).select("block_id", pl.col("cycles_per_100").alias("measured"))
    for name, table_id in tables.items():
        pred = store.query("SELECT block_id, cycles FROM predictions WHERE table_id = ? AND iterations = 100",
                           db, [table_id]).rename({"cycles": name})
        frame = frame.join(pred, on="block_id", how="left")
    return frame


def compare(evaluations: pl.DataFrame, default_id: str, learned_id: str) -> pl.DataFrame:
    """Default against learned per (split, slice), with the slices made worse flagged."""
    d = evaluations.filter(pl.col("table_id") == default_id).select("split", "slice", "n", pl.col("mape").alias("default_mape"),
                                                                     pl.col("kendall_tau").alias("default_tau"))
    l = evaluations.filter(pl.col("table_id") == learned_id).select("split", "slice", pl.col("mape").alias("learned_mape"),
                                                                     pl.col("kendall_tau").alias("learned_tau"))
    return d.join(l, on=["split", "slice"]).with_columns(
        (pl.col("learned_mape") > pl.col("default_mape") + 1e-12).alias("worse")).sort(["split", "slice"])


def changed_parameters(default: ParamTable, learned: ParamTable, top: int = 20) -> pl.DataFrame:
    """The opcodes whose parameters moved most (sum of absolute changes)."""
    moved = diff(default, learned)
    if moved.is_empty():
        return moved
    return (moved.group_by("opcode").agg(
        pl.col("delta").abs().sum().alias("total_change"),
        (pl.col("param") + pl.lit(": ") + pl.col("base").cast(pl.Utf8) + pl.lit("→")
         + pl.col("value").cast(pl.Utf8)).str.join(", ").alias("changes"))
            .sort("total_change", descending=True).head(top))

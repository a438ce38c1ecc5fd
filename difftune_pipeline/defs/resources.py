"""Resources: the warehouse, the engine, and where the input data lives.

Profiles (``DIFFTUNE_PROFILE``): ``sample`` reads the sample bundled in the
package; ``smoke`` the same sample with tiny DiffTune settings (a quick check of
the whole graph); ``full`` reads BHive's files from ``DIFFTUNE_DATA_DIR`` (laid
out as ``ground_truth/bhive_{hsw,ivb,skl}.csv`` and ``bhive_sources/*.csv``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import dagster as dg
import polars as pl

from difftune_pipeline import store
from difftune_pipeline.engine import Engine

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "data" / "sample"
DEFAULT_INBOX = store.DEFAULT_PATH.parent / "inbox"
# µarch -> (file under ground_truth/, unit). AMD Zen+ (nanoBench, AnICA) is modelled by LLVM's znver1.
FULL_MEASUREMENTS = {"haswell": ("bhive_hsw.csv", "cycles_per_100"), "ivybridge": ("bhive_ivb.csv", "cycles_per_100"),
                     "skylake": ("bhive_skl.csv", "cycles_per_100"),
                     "znver1": ("other/anica_nanobench_zenplus_cycles_per_iter.csv", "cycles_per_iteration")}


class MeasurementFile(dg.Config):
    path: str
    uarch: str
    unit: str = "cycles_per_100"


class Inbox(dg.ConfigurableResource):
    """The folder new measurement batches are dropped into (``<path>/<mcpu>/<name>.csv``);
    a file counts once it has not changed for ``settle_seconds``."""

    path: str = str(DEFAULT_INBOX)
    settle_seconds: float = 10.0


class Warehouse(dg.ConfigurableResource):
    """The DuckDB warehouse file; writers are short transactions, queries read-only."""

    path: str = str(store.DEFAULT_PATH)

    def query(self, sql: str, params: list | None = None) -> pl.DataFrame:
        return store.query(sql, self.path, params)


@functools.cache
def _engine(mcpu: str) -> Engine:
    return Engine(mcpu)


class EngineResource(dg.ConfigurableResource):
    """The in-process llvm-mca engine for one -mcpu."""

    mcpu: str = "haswell"

    def get(self) -> Engine:
        return _engine(self.mcpu)


class DataSources(dg.ConfigurableResource):
    """Measurement batches and block-corpus files to ingest."""

    measurement_files: list[MeasurementFile]
    corpus_files: list[str]

    @classmethod
    def sample(cls) -> DataSources:
        return cls(
            measurement_files=[MeasurementFile(path=str(SAMPLE_DIR / "bhive_hsw_sample.csv"), uarch="haswell")],
            corpus_files=sorted(str(p) for p in (SAMPLE_DIR / "corpus").glob("*.csv")),
        )

    @classmethod
    def full(cls, data_dir: str) -> DataSources:
        root = Path(data_dir)
        files = [MeasurementFile(path=str(root / "ground_truth" / name), uarch=uarch, unit=unit)
                 for uarch, (name, unit) in FULL_MEASUREMENTS.items() if (root / "ground_truth" / name).exists()]
        corpus = sorted(str(p) for p in (root / "bhive_sources").glob("*.csv"))
        if not files:
            raise FileNotFoundError(f"DIFFTUNE_DATA_DIR={data_dir} holds none of "
                                    f"ground_truth/{sorted(name for name, _ in FULL_MEASUREMENTS.values())}")
        return cls(measurement_files=files, corpus_files=corpus)


def sources_for_profile(profile: str, data_dir: str | None) -> DataSources:
    if profile in ("sample", "smoke"):
        return DataSources.sample()
    if profile == "full":
        if not data_dir:
            raise ValueError("the full profile needs DIFFTUNE_DATA_DIR")
        return DataSources.full(data_dir)
    raise ValueError(f"unknown DIFFTUNE_PROFILE {profile!r}: sample, smoke or full")


@dg.definitions
def resources() -> dg.Definitions:
    import os

    profile = os.environ.get("DIFFTUNE_PROFILE", "sample")
    return dg.Definitions(
        resources={
            "warehouse": Warehouse(path=os.environ.get("DIFFTUNE_WAREHOUSE", str(store.DEFAULT_PATH))),
            "engine": EngineResource(mcpu=os.environ.get("DIFFTUNE_MCPU", "haswell")),
            "sources": sources_for_profile(profile, os.environ.get("DIFFTUNE_DATA_DIR")),
            "settings": DiffTuneSettings.for_profile(profile, **{
                k: v for k, v in (("surrogate_model", os.environ.get("DIFFTUNE_SURROGATE")),
                                  ("tuner", os.environ.get("DIFFTUNE_TUNER")),
                                  ("search_halving", os.environ.get("DIFFTUNE_SEARCH_HALVING") == "1" or None)) if v}),
            "inbox": Inbox(path=os.environ.get("DIFFTUNE_INBOX", str(DEFAULT_INBOX))),
        }
    )


class DiffTuneSettings(dg.ConfigurableResource):
    """How much to sample, simulate and train (see ``difftune_pipeline.pipeline.Settings``)."""

    presets: list[str] = ["perturb", "difftune"]
    tables_per_preset: int = 24
    blocks_per_table: int = 0
    iterations: int = 100
    surrogate_model: str = "structured"   # structured | ithemal (DiffTune's LSTM)
    surrogate_epochs: int = 20            # ithemal
    surrogate_hidden: int = 64            # ithemal
    structured_seconds: float = 120.0     # structured: training time
    tuner: str = "combined"               # surrogate | direct | combined
    tune_start: str = "default"
    tune_steps: int = 300
    tune_lr: float = 0.05
    search_budget: int = 30_000           # direct/combined: block simulations
    search_rounds: int = 3
    search_halving: bool = False          # also try halving values >= 4 (far-off defaults, e.g. znver1)
    surrogate_max_heldout_mape: float = 0.25  # the surrogate's fidelity check fails above this

    def to_settings(self, shards: int):
        from difftune_pipeline.pipeline import Settings
        from difftune_pipeline.search import SearchConfig
        from difftune_pipeline.structured import StructuredConfig
        from difftune_pipeline.surrogate import SurrogateConfig
        from difftune_pipeline.tune import TuneConfig

        return Settings(presets=list(self.presets), tables_per_preset=self.tables_per_preset,
                        blocks_per_table=self.blocks_per_table, shards=shards, iterations=self.iterations,
                        surrogate_model=self.surrogate_model,
                        surrogate=SurrogateConfig(epochs=self.surrogate_epochs, hidden=self.surrogate_hidden),
                        structured=StructuredConfig(seconds=self.structured_seconds),
                        tuner=self.tuner, tune=TuneConfig(start=self.tune_start, steps=self.tune_steps, lr=self.tune_lr),
                        search=SearchConfig(budget=self.search_budget, rounds=self.search_rounds,
                                            halving=self.search_halving))

    @classmethod
    def for_profile(cls, profile: str, **overrides) -> DiffTuneSettings:
        """The settings of a profile, with ``overrides`` (built as one resource:
        Dagster rebuilds resources from their constructor arguments)."""
        presets = {
            "full": dict(tables_per_preset=32, blocks_per_table=3000, surrogate_epochs=12, structured_seconds=300,
                         tune_steps=400, search_budget=192_000),
            # the whole graph in about a minute: a check, not a result
            "smoke": dict(tables_per_preset=2, blocks_per_table=200, surrogate_epochs=1, structured_seconds=5,
                          tune_steps=10, search_budget=3000, search_rounds=1, surrogate_max_heldout_mape=1.0),
        }
        return cls(**{**presets.get(profile, {}), **overrides})

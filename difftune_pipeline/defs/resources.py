"""Resources: the warehouse, the engine, where the input data lives, the inbox,
and the settings (a profile of ``difftune_pipeline.config`` with overrides).

Environment: ``DIFFTUNE_PROFILE`` (``sample``: the sample bundled in the
package; ``smoke``: the same with tiny settings, a quick check of the whole
graph; ``full``: BHive's files under ``DIFFTUNE_DATA_DIR``), ``DIFFTUNE_SETTINGS``
(JSON of dotted overrides, e.g. ``{"search.budget": 3000}``), and the shortcuts
``DIFFTUNE_SURROGATE``, ``DIFFTUNE_TUNER`` and ``DIFFTUNE_SEARCH_HALVING=1``.
"""

from __future__ import annotations

import functools
import json
import os

import dagster as dg

from difftune_pipeline import config
from difftune_pipeline.engine import Engine
from difftune_pipeline.warehouse import DEFAULT_PATH

DEFAULT_INBOX = DEFAULT_PATH.parent / "inbox"


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

    path: str = str(DEFAULT_PATH)


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
    def for_profile(cls, profile: str, data_dir: str | None) -> DataSources:
        measurements, corpus = config.input_files(profile, data_dir)
        return cls(
            measurement_files=[MeasurementFile(path=p, uarch=u, unit=unit) for p, u, unit in measurements],
            corpus_files=corpus,
        )


class DiffTuneSettings(dg.ConfigurableResource):
    """How much to sample, simulate, train and search: a profile and overrides of
    its fields (JSON of dotted names). Dagster rebuilds a resource from these two
    fields in every run, so every run sees the same settings."""

    profile: str = "sample"
    overrides: str = "{}"

    def get(self) -> config.Settings:
        return config.settings_for(self.profile, config.parse_overrides(self.overrides))


def settings_from_env(env=os.environ) -> DiffTuneSettings:
    overrides = config.parse_overrides(env.get("DIFFTUNE_SETTINGS"))
    for var, name in (("DIFFTUNE_SURROGATE", "surrogate_model"), ("DIFFTUNE_TUNER", "tuner")):
        if env.get(var):
            overrides[name] = env[var]
    if env.get("DIFFTUNE_SEARCH_HALVING") == "1":
        overrides["search.halving"] = True
    settings = DiffTuneSettings(profile=env.get("DIFFTUNE_PROFILE", "sample"), overrides=json.dumps(overrides))
    settings.get()  # refuse a bad profile or override when the definitions load, not in a run
    return settings


@dg.definitions
def resources() -> dg.Definitions:
    settings = settings_from_env()
    return dg.Definitions(
        resources={
            "warehouse": Warehouse(path=os.environ.get("DIFFTUNE_WAREHOUSE", str(DEFAULT_PATH))),
            "engine": EngineResource(mcpu=os.environ.get("DIFFTUNE_MCPU", "haswell")),
            "sources": DataSources.for_profile(settings.profile, os.environ.get("DIFFTUNE_DATA_DIR")),
            "settings": settings,
            "inbox": Inbox(path=os.environ.get("DIFFTUNE_INBOX", str(DEFAULT_INBOX))),
        }
    )

"""Resources: the warehouse, the engines, where simulations run, where the input
data lives, the inbox, and the settings (a profile of ``difftune_pipeline.config``
with overrides).

Environment: ``DIFFTUNE_PROFILE`` (``sample``: the sample bundled in the
package; ``smoke``: the same with tiny settings, a quick check of the whole
graph; ``full``: BHive's files under ``DIFFTUNE_DATA_DIR``), ``DIFFTUNE_SETTINGS``
(JSON of dotted overrides, e.g. ``{"search.budget": 3000}``), and the shortcuts
``DIFFTUNE_SURROGATE``, ``DIFFTUNE_TUNER``, ``DIFFTUNE_MODEL`` (``auto``,
``llvm-mca``, ``extended``, ``llvm-mca+front_end+…``) and ``DIFFTUNE_SEARCH_HALVING=1``;
``DIFFTUNE_COMPUTE`` (``threads``, the default, or ``ray``), ``DIFFTUNE_RAY_WORKERS``
and ``RAY_ADDRESS`` (a running Ray cluster; without it Ray starts on this machine).
"""

from __future__ import annotations

import functools
import json
import os

import dagster as dg

from difftune_pipeline import config, environment, steps
from difftune_pipeline.defs.partitions import SHARDS, uarch_of
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.ray_engine import RayEngine, WorkerPool
from difftune_pipeline.warehouse import DEFAULT_PATH

DEFAULT_INBOX = environment.inbox_path({})


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
    """The DuckDB warehouse file; writers are short transactions, queries read-only.
    ``simulations``: where simulated chunks' Parquet files go (empty: beside the file)."""

    path: str = str(DEFAULT_PATH)
    simulations: str = ""


# Decoding x86 does not depend on the CPU model: ingestion decodes with this one.
DECODER_MCPU = "haswell"


@functools.cache
def _engine(mcpu: str) -> Engine:
    return Engine(mcpu)


@functools.cache
def _ray_pool(workers: int, address: str) -> WorkerPool:
    return WorkerPool(workers, address or None)


@functools.cache
def _ray_engine(mcpu: str, workers: int, address: str) -> RayEngine:
    return RayEngine(mcpu, functools.partial(_ray_pool, workers, address))  # connects on first simulation


class EngineResource(dg.ConfigurableResource):
    """The in-process llvm-mca engines, one per -mcpu (built once per process)."""

    def get(self, mcpu: str) -> Engine:
        return _engine(mcpu)

    def decoder(self) -> Engine:
        return _engine(DECODER_MCPU)


class Compute(dg.ConfigurableResource):
    """Where the heavy stages simulate: ``threads`` (this process's cores) or
    ``ray`` (Ray workers, one per free CPU unless ``workers`` says; ``address`` or
    ``RAY_ADDRESS`` attaches to a running cluster). Results are the same."""

    backend: str = "threads"
    workers: int = 0
    address: str = ""

    def engine(self, mcpu: str) -> Engine:
        if self.backend == "threads":
            return _engine(mcpu)
        if self.backend == "ray":
            return _ray_engine(mcpu, self.workers, self.address)
        raise ValueError(f"unknown compute backend {self.backend!r}: threads or ray")

    def describe(self) -> str:
        if self.backend == "ray":
            where = self.address or os.environ.get("RAY_ADDRESS") or "local"
            return f"ray ({where}, {self.workers or 'one per CPU'} workers)"
        return self.backend


def compute_from_env(env=os.environ) -> Compute:
    """The ``Compute`` of ``DIFFTUNE_COMPUTE`` and ``DIFFTUNE_RAY_WORKERS``, refused
    when the definitions load if either is wrong."""
    read = environment.read(env)
    return Compute(backend=read.compute, workers=read.ray_workers)


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
    """The profile and overrides of the environment (``environment.read``): a bad
    one is refused when the definitions load, not in a run."""
    read = environment.read(env)
    return DiffTuneSettings(profile=read.profile, overrides=json.dumps(read.overrides))


@dg.definitions
def resources() -> dg.Definitions:
    settings = settings_from_env()
    return dg.Definitions(
        resources={
            "warehouse": Warehouse(path=str(environment.warehouse_path()), simulations=environment.simulations_root()),
            "engine": EngineResource(),
            "compute": compute_from_env(),
            "sources": DataSources.for_profile(settings.profile, os.environ.get("DIFFTUNE_DATA_DIR")),
            "settings": settings,
            "inbox": Inbox(path=str(environment.inbox_path())),
        }
    )


def step_context(
    context: dg.AssetExecutionContext,
    warehouse: Warehouse,
    engine: EngineResource,
    settings: DiffTuneSettings,
    compute: Compute | None = None,
) -> steps.StepContext:
    """The step context of the partition's µarch; ``compute`` chooses where its
    simulations run (this process's threads, or Ray workers)."""
    chosen = settings.get()
    if chosen.shards != len(SHARDS.get_partition_keys()):
        raise dg.Failure(
            f"shards = {chosen.shards}, but the simulations asset has {len(SHARDS.get_partition_keys())} "
            "partitions: the shard count is fixed by the partitions"
        )
    mcpu = uarch_of(context)
    return steps.StepContext(
        warehouse.path, compute.engine(mcpu) if compute else engine.get(mcpu), chosen, warehouse.simulations
    )

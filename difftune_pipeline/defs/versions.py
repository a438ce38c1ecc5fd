"""Dagster's own staleness, made to hold over the warehouse. Every asset's code
version names its code and the settings its step reads (and, for the two that
read files, those files); every materialisation reports a data version, a
fingerprint of what it stored, and records it in the warehouse too. An asset
partition is up to date when Dagster finds it fresh (its code, and its inputs'
data versions, as when it was materialised) and the warehouse still holds what
it reported: a copied or rebuilt warehouse, a deleted simulation chunk or
surrogate checkpoint is not up to date, whatever the instance remembers.
``difftune materialize`` skips what is up to date; the UI's "Materialize
unsynced" reads the same versions."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._time import get_current_datetime

from difftune_pipeline import config, environment
from difftune_pipeline.steps.context import fingerprint, step_version
from difftune_pipeline.warehouse import simulations, tables, versions

# asset -> the step whose code and settings it runs
STEPS = {
    "block_accesses": "accesses",
    "default_params": "default_params",
    "block_features": "features",
    "sampled_tables": "sampled_tables",
    "simulations": "simulations",
    "surrogate": "surrogate",
    "learned_params": "learned_params",
    "evaluation": "evaluation",
}
READS_FILES = ("block_sources", "measurements")  # the files of the profile (resources.DataSources)
# Run whenever selected: which inbox batches to read is the inbox's to say (defs/inbox.py).
ALWAYS_RUN = {"measurement_batches"}
INGESTION_VERSION = "1"  # the ingestion assets' code version: bump when what they store changes


def with_versions(defs: dg.Definitions) -> dg.Definitions:
    """``defs`` with each asset's code version as the environment's settings and files make it."""
    settings = config.settings_for(*_profile())
    files = _files_version()

    def versioned(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        if name in STEPS:
            version = step_version(STEPS[name], settings)
            if name == "surrogate":  # where it trains: a GPU's weights are close to the CPU's, not the same
                version += "-" + (os.environ.get("DIFFTUNE_TORCH_DEVICE") or "auto")
        else:
            version = INGESTION_VERSION + ("-" + files if name in READS_FILES else "")
        return spec.replace_attributes(code_version=version)

    return defs.map_asset_specs(func=versioned)


def _profile() -> tuple[str, dict]:
    read = environment.read(os.environ)
    return read.profile, read.overrides


def _files_version() -> str:
    """The profile's input files as they are now (path, size, modification time)."""
    measurements, corpus = config.input_files(_profile()[0], os.environ.get("DIFFTUNE_DATA_DIR"))
    stats = []
    for path in [m[0] for m in measurements] + list(corpus):
        try:
            stat = Path(path).stat()
            stats.append((str(path), stat.st_size, stat.st_mtime_ns))
        except OSError:
            stats.append((str(path), None, None))
    return fingerprint(stats)


def reported(context: dg.AssetExecutionContext, db: str, version: str) -> dg.DataVersion:
    """``version`` recorded in the warehouse beside the data, as the data version to report."""
    partition = str(context.partition_key) if context.has_partition_key else None
    versions.record(db, context.asset_key.to_user_string(), partition, version)
    return dg.DataVersion(version)


def materialized(context: dg.AssetExecutionContext, db: str, version: str, metadata: dict) -> dg.MaterializeResult:
    """A materialisation's result: its metadata, and ``version`` reported (``reported``)."""
    return dg.MaterializeResult(metadata=metadata, data_version=reported(context, db, version))


class Freshness:
    """Which asset partitions are up to date, asked in the order they run: each
    question reads the instance as it is then (what ran before is counted)."""

    def __init__(self, instance: dg.DagsterInstance, graph, db: Path):
        self.instance, self.graph, self.db = instance, graph, db

    def up_to_date(self, key: dg.AssetKey, partition: str | None) -> bool:
        if not self.db.exists() or key.to_user_string() in ALWAYS_RUN:
            return False
        latest = self.instance.get_latest_data_version_record(key, partition_key=partition)
        run = latest and latest.run_id and self.instance.get_run_by_id(latest.run_id)
        if run and run.status != dg.DagsterRunStatus.SUCCESS:  # a blocking check failed: it says so again
            return False
        view = AssetGraphView(
            temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
            instance=self.instance,
            asset_graph=self.graph,
        )
        resolver = CachingStaleStatusResolver(self.instance, self.graph, loading_context=view)
        if resolver.get_status(key, partition) != StaleStatus.FRESH:
            return False
        current = resolver.get_current_data_version(key, partition).value
        name = key.to_user_string()
        if versions.recorded(self.db).get((name, partition or "")) != current:
            return False
        return self._still_stored(key, partition, current)

    def _still_stored(self, key: dg.AssetKey, partition: str | None, version: str) -> bool:
        """Whether what a version names is there: the simulations' chunks, the
        surrogate's checkpoint, the learned table, a µarch's features and evaluation rows."""
        name = key.to_user_string()
        if name == "simulations":
            parts = self.graph.get(key).partitions_def.get_partition_key_from_str(partition).keys_by_dimension
            return not simulations.shard_damage(self.db, parts["uarch"], parts["shard"])
        if name == "surrogate":
            run = simulations.surrogate_run(self.db, version)
            return run is not None and Path(run["checkpoint"]).exists()
        if name == "learned_params":
            return tables.table_exists(self.db, version)
        if name in versions.PER_UARCH:
            return versions.uarch_version(self.db, name, partition) == version
        return True

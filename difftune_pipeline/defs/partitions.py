"""How the DiffTune assets are partitioned: by µarch (a partition appears when
measurements of a CPU LLVM models arrive), and the simulations by µarch × shard."""

import dagster as dg

from difftune_pipeline import config

UARCHS = dg.DynamicPartitionsDefinition(name="uarchs")
SHARDS = dg.StaticPartitionsDefinition([f"shard-{i}" for i in range(config.Settings().shards)])
UARCH_SHARDS = dg.MultiPartitionsDefinition({"uarch": UARCHS, "shard": SHARDS})


def uarch_of(context: dg.AssetExecutionContext) -> str:
    """The µarch of the partition being materialised (either partitioning)."""
    key = context.partition_key
    return key.keys_by_dimension["uarch"] if isinstance(key, dg.MultiPartitionKey) else key


def shard_index(context: dg.AssetExecutionContext) -> int:
    return SHARDS.get_partition_keys().index(context.partition_key.keys_by_dimension["shard"])


def add_uarchs(instance: dg.DagsterInstance, uarchs) -> list[str]:
    """Add the partitions of µarchs not yet known; returns those added."""
    known = set(instance.get_dynamic_partitions(UARCHS.name))
    new = sorted(set(uarchs) - known)
    if new:
        instance.add_dynamic_partitions(UARCHS.name, new)
    return new

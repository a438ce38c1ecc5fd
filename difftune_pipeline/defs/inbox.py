"""New measurements: a sensor watches the inbox, adds a dynamic partition per
batch and requests its ingestion; a CPU's first usable batch adds its µarch
partition, and automation conditions re-tune that µarch."""

import dagster as dg

from difftune_pipeline.defs.ingest import GROUP, SANITY, SANITY_DESCRIPTION, WRITER_POOL, batch_metadata
from difftune_pipeline.defs.metadata import blocking_check, check_result, row_count
from difftune_pipeline.defs.partitions import add_uarchs
from difftune_pipeline.defs.resources import EngineResource, Inbox, Warehouse
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.ingest import inbox as inbox_files
from difftune_pipeline.steps.checks import measurement_sanity
from difftune_pipeline.warehouse import ingestion

BATCHES = dg.DynamicPartitionsDefinition(name="measurement_batches")


@dg.asset(
    group_name=GROUP,
    partitions_def=BATCHES,
    pool=WRITER_POOL,
    kinds={"duckdb"},
    check_specs=[blocking_check(SANITY, "measurement_batches", SANITY_DESCRIPTION, BATCHES)],
)
def measurement_batches(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, inbox: Inbox):
    """One batch dropped into the inbox (``<inbox>/<mcpu>/<name>.csv``), ingested
    into ``measurements``; its bad rows go to ``quarantine``. The partition key is
    ``<mcpu>-<batch id>``: the hash of the file's bytes."""
    key = context.partition_key
    found = inbox_files.find(inbox.path, key)
    batch_id = key.rsplit("-", 1)[1]
    if found is not None:
        summary = ingest.ingest_measurements(found.path, found.uarch, warehouse.path, engine.decoder(), found.unit)
        meta = batch_metadata([summary])
        if found.uarch in ingestion.measured_uarchs(warehouse.path):  # usable: sane and not dropped
            add_uarchs(context.instance, [found.uarch])
    elif ingestion.batch_exists(warehouse.path, batch_id):
        meta = {"already_ingested": True}  # the file was removed after ingestion: nothing is lost
    else:
        raise dg.Failure(
            f"batch {key}: no file with these bytes in {inbox.path}/{key.rsplit('-', 1)[0]}/ and not ingested before"
        )
    yield dg.MaterializeResult(metadata={**meta, **row_count(warehouse, "measurements")})
    yield check_result(SANITY, measurement_sanity(warehouse.path, [batch_id]))


@dg.sensor(target=measurement_batches, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext, inbox: Inbox):
    """Notices settled files in the inbox; each new batch becomes a partition and
    a run request. A file seen before (same bytes) adds nothing."""
    ready, waiting = inbox_files.scan(inbox.path, inbox.settle_seconds)
    known = set(context.instance.get_dynamic_partitions(BATCHES.name))
    new = {}
    for item in ready:
        key = item.partition_key
        if key not in known and key not in new:
            new[key] = item
    if not new:
        return dg.SkipReason("no new batch" + ("; " + "; ".join(waiting) if waiting else ""))
    for line in waiting:
        context.log.info(line)
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(partition_key=k, run_key=k, tags={"inbox/file": str(item.path)}) for k, item in new.items()
        ],
        dynamic_partitions_requests=[BATCHES.build_add_request(list(new))],
    )

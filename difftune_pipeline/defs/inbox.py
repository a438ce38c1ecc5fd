"""New measurements: a sensor watches the inbox, adds a dynamic partition per
batch and requests its ingestion; a CPU's first usable batch adds its µarch
partition, and automation conditions re-tune that µarch."""

import json
from pathlib import Path

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
# A batch in one of these states is done with: its bytes are never read again.
SETTLED = {"ok", "failed_sanity", "dropped"}


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
    ``<mcpu>-<batch id>``: the hash of the file's bytes. A batch whose bytes are gone
    or changed before they were read is recorded so (``vanished``, ``changed``) and
    blocks nothing; its file, seen again with those bytes, is ingested then."""
    key = context.partition_key
    uarch, batch_id = key.rsplit("-", 1)
    recorded = list(_statuses(warehouse.path, [batch_id]).values())
    found = None if set(recorded) & SETTLED else inbox_files.find(inbox.path, key)
    if found is not None:
        summary = ingest.ingest_measurements(
            found.path, found.uarch, warehouse.path, engine.decoder(), found.unit, batch_id=batch_id
        )
    elif recorded:  # ingested (the file may since be gone: nothing is lost), or recorded unread before
        summary = None
    else:
        source = context.run.tags.get("inbox/file", f"{inbox.path}/{uarch}/")
        summary = ingest.record_missing(warehouse.path, batch_id, uarch, source)
    if summary is not None and summary.note:
        context.log.warning(summary.note)  # and in the metadata's ``warning``, which the command prints
    if uarch in ingestion.measured_uarchs(warehouse.path):  # usable: sane and not dropped
        add_uarchs(context.instance, [uarch])
    meta = batch_metadata([summary]) if summary is not None else {"already_ingested": True, "status": recorded[0]}
    yield dg.MaterializeResult(metadata={**meta, **row_count(warehouse, "measurements")})
    yield check_result(SANITY, measurement_sanity(warehouse.path, [batch_id]))


def pending(inbox: Inbox, db: str) -> tuple[dict[str, inbox_files.InboxFile], list[str]]:
    """The sensor's work: the settled inbox files whose batch the warehouse has not
    ingested (a new file, or the bytes of one recorded unread), by partition key; and
    a line per file that is not ready, with why."""
    ready, waiting = inbox_files.scan(inbox.path, inbox.settle_seconds)
    keys = {item.partition_key: item for item in ready}
    statuses = _statuses(db, [k.rsplit("-", 1)[1] for k in keys])
    return {k: item for k, item in keys.items() if statuses.get(k.rsplit("-", 1)[1]) not in SETTLED}, waiting


def run_request(key: str, item: inbox_files.InboxFile) -> dg.RunRequest:
    """A batch's run, once per version of its file (the run key names its modification time)."""
    return dg.RunRequest(partition_key=key, run_key=f"{key}@{version(item)}", tags={"inbox/file": str(item.path)})


def version(item: inbox_files.InboxFile) -> int:
    return item.path.stat().st_mtime_ns


def _statuses(db: str, batch_ids: list[str]) -> dict[str, str]:
    """batch id -> status of those of ``batch_ids`` the warehouse records (none before it exists)."""
    if not Path(db).exists():
        return {}
    frame = ingestion.batch_statuses(db, batch_ids)
    return dict(zip(frame["batch_id"].to_list(), frame["status"].to_list()))


@dg.sensor(target=measurement_batches, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext, inbox: Inbox, warehouse: Warehouse):
    """Notices settled files in the inbox; each batch the warehouse has not ingested
    becomes a partition and a run request, once per version of its file (the cursor
    holds the versions requested of the batches not yet ingested). A file seen before
    (same bytes) adds nothing."""
    todo, waiting = pending(inbox, warehouse.path)
    requested = json.loads(context.cursor or "{}")
    new = {k: item for k, item in todo.items() if requested.get(k) != version(item)}
    if not new:
        return dg.SkipReason("no new batch" + ("; " + "; ".join(waiting) if waiting else ""))
    for line in waiting:
        context.log.info(line)
    known = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[run_request(k, item) for k, item in new.items()],
        dynamic_partitions_requests=[BATCHES.build_add_request([k for k in new if k not in known])],
        cursor=json.dumps({k: version(item) for k, item in todo.items()}),
    )

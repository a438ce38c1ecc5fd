"""New measurements: a sensor watches the inbox, adds a dynamic partition per
batch and requests its ingestion; a CPU's first usable batch adds its µarch
partition, and automation conditions re-tune that µarch."""

import json
from pathlib import Path

import dagster as dg

from difftune_pipeline.defs import versions
from difftune_pipeline.defs.assets import asset
from difftune_pipeline.defs.ingest import GROUP, SANITY, SANITY_DESCRIPTION, batch_metadata
from difftune_pipeline.defs.metadata import blocking_check, check_result, row_count
from difftune_pipeline.defs.partitions import UARCHS, add_uarchs
from difftune_pipeline.defs.resources import EngineResource, Inbox, Warehouse
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.ingest import inbox as inbox_files
from difftune_pipeline.ingest import owner
from difftune_pipeline.steps.checks import measurement_sanity
from difftune_pipeline.warehouse import batch_state, connection, ingestion
from difftune_pipeline.warehouse import versions as store

BATCHES = dg.DynamicPartitionsDefinition(name="measurement_batches")


@asset(
    GROUP,
    partitions=BATCHES,
    kinds={"duckdb"},
    checks=[blocking_check(SANITY, "measurement_batches", SANITY_DESCRIPTION, BATCHES)],
)
def measurement_batches(context: dg.AssetExecutionContext, warehouse: Warehouse, engine: EngineResource, inbox: Inbox):
    """One batch dropped into the inbox (``<inbox>/<mcpu>/<name>.csv``), ingested
    into ``measurements``; its bad rows go to ``quarantine``. The partition key is
    ``<mcpu>-<batch id>``: the hash of the file's bytes. A batch whose bytes are gone
    or changed before they were read is recorded so (``vanished``, ``changed``) and
    blocks nothing; its file, seen again with those bytes, is ingested then."""
    key = context.partition_key
    uarch, batch_id = key.rsplit("-", 1)
    record = _records(warehouse.path, [batch_id]).get(batch_id)
    status = record["status"] if record else None
    found = None if batch_state.settled(status) else inbox_files.find(inbox.path, key)
    if found is not None:
        summary = ingest.ingest_measurements(
            found.path, found.uarch, warehouse.path, engine.decoder(), found.unit, batch_id=batch_id
        )
    elif record is not None:  # ingested (its file may since be gone: nothing is lost), or recorded unread before
        summary = None
    else:
        source = context.run.tags.get("inbox/file", f"{inbox.path}/{uarch}/")
        summary = ingest.record_missing(warehouse.path, batch_id, uarch, source)
    if summary is not None and summary.note:
        context.log.warning(summary.note)  # and in the metadata's ``warning``, which the command prints
    if uarch in ingestion.measured_uarchs(warehouse.path):  # usable: sane and not dropped
        add_uarchs(context.instance, [uarch])
    meta = batch_metadata([summary]) if summary is not None else {"already_ingested": batch_state.settled(status)}
    stored = store.table_version(warehouse.path, "batches", "WHERE batch_id = ?", [batch_id])
    yield dg.MaterializeResult(
        metadata={**meta, "status": summary.status if summary else status, **row_count(warehouse, "measurements")},
        data_version=versions.reported(context, warehouse.path, stored),
    )
    yield check_result(SANITY, measurement_sanity(warehouse.path, [batch_id]))


def pending(inbox: Inbox, db: str) -> tuple[dict[str, tuple[inbox_files.InboxFile, str]], list[str]]:
    """The sensor's work: the settled inbox files whose batch is to be read (new, recorded
    unread, withdrawn as ``replaced`` by its file's other bytes, or left ``ingesting`` by a
    reader that died; not one a live reader holds),
    by partition key, each with its version (its file's modification time and the
    batch's record, with when its status was set: a run per version, also for a file put
    back at the same time); and a line per file that is not ready, with why."""
    ready, waiting = inbox_files.scan(inbox.path, inbox.settle_seconds)
    keys = {item.partition_key: item for item in ready}
    records = _records(db, [k.rsplit("-", 1)[1] for k in keys])
    todo, now = {}, connection.now()
    for key, item in keys.items():
        record = records.get(key.rsplit("-", 1)[1]) or {"status": None, "owner": None, "status_at": None}
        status, holder = record["status"], record["owner"]
        held = status == "ingesting" and not owner.abandoned(holder, record["status_at"], now)
        if batch_state.settled(status) or held:
            continue
        todo[key] = (item, f"{item.path.stat().st_mtime_ns}:{status}:{holder}:{record['status_at']}")
    return todo, waiting


def run_request(key: str, item: inbox_files.InboxFile, version: str) -> dg.RunRequest:
    """A batch's run, once per version (the run key names it)."""
    return dg.RunRequest(partition_key=key, run_key=f"{key}@{version}", tags={"inbox/file": str(item.path)})


def _records(db: str, batch_ids: list[str]) -> dict[str, dict]:
    """batch id -> record (status, owner, status_at) of those of ``batch_ids`` the
    warehouse holds (none before it exists)."""
    return batch_state.batch_records(db, batch_ids) if Path(db).exists() else {}


@dg.sensor(target=measurement_batches, minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(context: dg.SensorEvaluationContext, inbox: Inbox, warehouse: Warehouse):
    """Notices settled files in the inbox; each batch the warehouse has not ingested
    becomes a partition and a run request, once per version (the cursor holds the
    versions requested of the batches not yet ingested). A file seen before (same
    bytes) adds nothing; a batch whose reader died is requested again. The µarch
    partitions the warehouse implies are registered when the instance lacks them
    (another or a fresh DAGSTER_HOME)."""
    todo, waiting = pending(inbox, warehouse.path)
    requested = json.loads(context.cursor or "{}")
    new = {k: (item, version) for k, (item, version) in todo.items() if requested.get(k) != version}
    measured = ingestion.measured_uarchs(warehouse.path) if Path(warehouse.path).exists() else []
    unknown = sorted(set(measured) - set(context.instance.get_dynamic_partitions(UARCHS.name)))
    if not new and unknown:
        return dg.SensorResult(dynamic_partitions_requests=[UARCHS.build_add_request(unknown)])
    if not new:
        return dg.SkipReason("no new batch" + ("; " + "; ".join(waiting) if waiting else ""))
    for line in waiting:
        context.log.info(line)
    known = set(context.instance.get_dynamic_partitions(BATCHES.name))
    return dg.SensorResult(
        run_requests=[run_request(k, item, version) for k, (item, version) in new.items()],
        dynamic_partitions_requests=[
            BATCHES.build_add_request([k for k in new if k not in known]),
            *([UARCHS.build_add_request(unknown)] if unknown else []),
        ],
        cursor=json.dumps({k: version for k, (_, version) in todo.items()}),
    )

"""Running a selection of the asset graph in this process, as `difftune
materialize` does: unpartitioned assets in topological runs, a partitioned asset
one run per partition, each run only from its first asset that is not up to
date. Dead runs are reaped first; a run waits for its pools. What happens is
reported as events, which the command shows; the outcome is one line."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from difftune_pipeline import environment
from difftune_pipeline.defs import inbox, recovery
from difftune_pipeline.defs.partitions import UARCHS, add_uarchs
from difftune_pipeline.defs.resources import Inbox
from difftune_pipeline.defs.versions import Freshness
from difftune_pipeline.warehouse import ingestion

# A step that failed for one of these failed because of where it ran (a full
# disk, a busy warehouse, a setting found wrong late), not because of its code.
ENVIRONMENT_ERRORS = {
    "OSError",
    "IOException",
    "PermissionError",
    "FileNotFoundError",
    "WarehouseBusy",
    "TimeoutError",
    "ConnectionError",
    "SettingError",
    "OutOfMemoryException",
}
INTERRUPTS = {"KeyboardInterrupt", "DagsterExecutionInterruptedError"}
INTERRUPTED = 130
# Dagster's console log at its most detailed (it goes wherever stdout goes).
EVERY_EVENT = {"loggers": {"console": {"config": {"log_level": "DEBUG"}}}}


@dataclass(frozen=True)
class Plan:
    graph: object  # dagster's resolved asset graph
    job: object  # the implicit job over every asset
    keys: list  # the selected asset keys, in topological order


@dataclass(frozen=True)
class Notice:
    text: str
    warning: bool = False


@dataclass(frozen=True)
class Progress:
    done: int
    total: int | None = None
    description: str | None = None


@dataclass(frozen=True)
class GroupDone:
    names: str
    partitions: int
    up_to_date: int
    seconds: float


@dataclass(frozen=True)
class Failure:
    status: int  # 1, 2 where the machine is at fault, 130 when interrupted
    message: str  # one line


Event = Notice | Progress | GroupDone


def plan(select: str) -> Plan:
    """The selection's plan; a ValueError (one line, listing the assets) for one
    that is not a selection or matches nothing, or for definitions that do not load."""
    try:
        from difftune_pipeline.definitions import defs

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Dagster's beta notices belong in the log, not in front of the user
            definitions = defs()
            graph = definitions.resolve_asset_graph()
            job = definitions.resolve_implicit_global_asset_job_def()
    except Exception as exc:  # a definitions error is a tree of causes: its root is the one line to read
        raise ValueError(f"the pipeline's definitions did not load: {root_message(exc)}") from None
    keys = ", ".join(sorted(k.to_user_string() for k in graph.materializable_asset_keys))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            selected = dg.AssetSelection.from_string(select).resolve(graph)
    except Exception as exc:  # the selection grammar raises several error types; all are the user's to read
        why = f"--select {select!r} is not an asset selection ({root_message(exc)}); the assets: {keys}"
        raise ValueError(why) from None
    ordered = [k for level in graph.toposorted_asset_keys_by_level for k in sorted(level) if k in selected]
    if not ordered:
        raise ValueError(f"--select {select!r} matches no asset; the assets: {keys}")
    return Plan(graph, job, ordered)


def run(plan: Plan, uarchs: list[str] | None, report: Callable[[Event], None]) -> Failure | None:
    """Every run of the plan, in order; the first failure stops it (an inbox batch that
    fails its sanity check is reported and passed over)."""
    graph, groups = plan.graph, _groups(plan.graph, plan.keys)
    matched: set[str] = set()
    narrowed = False  # whether the selection has assets partitioned by µarch
    with dg.DagsterInstance.get() as instance:
        reaped, freed = recovery.reap_dead_runs(instance)
        for run_id in reaped:
            report(Notice(f"run {run_id} was left by a killed process: marked failed, its pool slots freed"))
        for run_id in freed:
            report(Notice(f"run {run_id} had finished but still held a pool slot: freed"))
        inbox_tags = _register(instance, [k for keys, _ in groups for k in keys], report)
        freshness = Freshness(instance, graph, environment.warehouse_path())
        done = 0
        for i, (group_keys, partitions_def) in enumerate(groups):
            # partitions are read when their asset's turn comes: ingestion adds the µarchs
            partitions = [None] if partitions_def is None else _partitions(partitions_def, instance, uarchs)
            batches = getattr(partitions_def, "name", None) == inbox.BATCHES.name
            if batches:  # only the inbox's batches to read
                partitions = [p for p in partitions if p in inbox_tags]
            narrowed |= partitions_def is not None
            matched |= {u for u in uarchs or [] if any(_uarch_of(p, partitions_def) == u for p in partitions)}
            later = sum(_count(d, instance, uarchs) for _, d in groups[i + 1 :])
            report(Progress(done, total=done + len(partitions) + later))
            names = ", ".join(k.to_user_string() for k in group_keys)
            started, current = time.monotonic(), 0
            for partition in partitions:
                label = names + (f" [{partition}]" if partition else "")
                report(Progress(done, description=f"checking {label}"))
                todo = _not_up_to_date(freshness, group_keys, partition)
                if todo:
                    report(Progress(done, description=f"materialising {label}"))
                    for pool in sorted(set().union(*(graph.get(k).pools for k in todo))):
                        recovery.wait_for_pool(instance, pool, lambda line: report(Notice(line)))
                    result = plan.job.execute_in_process(
                        instance=instance,
                        asset_selection=todo,
                        partition_key=partition,
                        raise_on_error=False,
                        tags={**recovery.run_tags(), **inbox_tags.get(partition, {})},
                        run_config=EVERY_EVENT,
                    )
                    for event in result.get_asset_materialization_events():
                        if (warning := event.materialization.metadata.get("warning")) is not None:
                            report(Notice(f"{label}: {warning.value}", warning=True))
                    if not result.success and batches and (why := _insane_batch(result)) is not None:
                        report(Notice(f"{label}: {why}", warning=True))
                    elif not result.success:
                        return _failed(label, result)
                else:
                    current += 1
                done += 1
                report(Progress(done))
            if partitions:  # (an inbox with no batch has none)
                report(GroupDone(names, len(partitions), current, time.monotonic() - started))
    for missing in sorted(set(uarchs or []) - matched) if narrowed else []:
        report(Notice(f"no partition of {missing}: it has no measurements, so nothing of it was materialised"))
    return None


def failure(exc: BaseException) -> Failure:
    """What an error outside any step (the instance, the warehouse) comes down to."""
    if isinstance(exc, KeyboardInterrupt):
        return Failure(INTERRUPTED, "interrupted")
    return Failure(_status(type(root(exc)).__name__), root_message(exc))


def root(exc: BaseException) -> BaseException:
    """The innermost cause: what a tree of wrapped errors comes down to."""
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    return exc


def root_message(exc: BaseException) -> str:
    """The innermost cause's first line."""
    cause = root(exc)
    text = str(cause).strip()
    return text.splitlines()[0] if text else type(cause).__name__


def _insane_batch(result) -> str | None:
    """Why an inbox batch's run failed, where its sanity check failing is all that failed
    (None otherwise): the batch is settled and never feeds tuning, so the batches after it
    are read and the steps after ingestion go on, as the daemon's would."""
    failures = [e.step_failure_data.error for e in result.all_events if e.is_step_failure]
    if any(error is None or error.cls_name != "DagsterAssetCheckFailedError" for error in failures):
        return None  # a step that failed of itself, not by its blocking check
    failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
    if not failed or any(e.check_name != inbox.SANITY for e in failed):
        return None
    reasons = "; ".join(e.description or "" for e in failed)
    return f"failed its sanity check, it never feeds tuning (`difftune batches list` shows it): {reasons}"


def _failed(label: str, result) -> Failure:
    """A failed run: the checks that failed, or the step's root error."""
    checks = [
        f"{e.asset_key.to_user_string()}:{e.check_name}" for e in result.get_asset_check_evaluations() if not e.passed
    ]
    if checks:
        return Failure(1, f"{label}: checks failed: {', '.join(checks)}")
    errors = [e.step_failure_data.error for e in result.all_events if e.is_step_failure and e.step_failure_data.error]
    cause = errors[0] if errors else None
    while cause is not None and cause.cause is not None:
        cause = cause.cause
    if cause is None:
        return Failure(1, label)
    if cause.cls_name in INTERRUPTS:  # Ctrl-C inside a step: Dagster records it as the step's failure
        return Failure(INTERRUPTED, "interrupted")
    message = cause.message.strip().splitlines()[0] if cause.message.strip() else cause.cls_name
    return Failure(_status(cause.cls_name), f"{label}: {message}")


def _status(cls_name: str) -> int:
    """2 when the machine is at fault (a full disk, a busy warehouse, a setting found wrong late), else 1."""
    return 2 if cls_name in ENVIRONMENT_ERRORS else 1


def _not_up_to_date(freshness: Freshness, keys: list, partition: str | None) -> list:
    """The assets of a run to materialise: from the first one not up to date on
    (what follows it reads what it writes); none when every one is up to date."""
    for i, key in enumerate(keys):
        if not freshness.up_to_date(key, partition):
            return keys[i:]
    return []


def _register(instance, keys: list, report: Callable[[Event], None]) -> dict[str, dict[str, str]]:
    """Partitions the warehouse implies and the instance may lack (a fresh or another
    DAGSTER_HOME): each µarch with usable measurements, and, when the inbox's batches
    are selected, each settled inbox file not yet ingested (the inbox sensor's work,
    run once). Returns the tags of each inbox partition's run."""
    warehouse = environment.warehouse_path()
    if warehouse.exists():
        add_uarchs(instance, ingestion.measured_uarchs(warehouse))
    if dg.AssetKey("measurement_batches") not in keys:
        return {}
    todo, waiting = inbox.pending(Inbox(path=str(environment.inbox_path())), str(warehouse))
    for line in waiting:
        report(Notice(f"inbox: {line}"))
    known = set(instance.get_dynamic_partitions(inbox.BATCHES.name))
    instance.add_dynamic_partitions(inbox.BATCHES.name, [k for k in todo if k not in known])
    return {k: dict(inbox.run_request(k, item, version).tags) for k, (item, version) in todo.items()}


def _groups(graph, ordered: list) -> list[tuple[list, object]]:
    """Consecutive unpartitioned assets run together; a partitioned asset runs alone."""
    groups: list[tuple[list, object]] = []
    for key in ordered:
        partitions_def = graph.get(key).partitions_def
        if partitions_def is None and groups and groups[-1][1] is None:
            groups[-1][0].append(key)
        else:
            groups.append(([key], partitions_def))
    return groups


def _count(partitions_def, instance, uarchs: list[str] | None) -> int:
    """Runs an asset takes as far as is known now (ingestion may add µarchs)."""
    return 1 if partitions_def is None else len(_partitions(partitions_def, instance, uarchs))


def _partitions(partitions_def, instance, uarchs: list[str] | None) -> list[str]:
    """The partition keys to run, narrowed to ``uarchs`` (by the µarch dimension where there is one)."""
    keys = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    return keys if not uarchs else [k for k in keys if _uarch_of(k, partitions_def) in uarchs]


def _uarch_of(key, partitions_def) -> str | None:
    """The µarch of a partition key: ``skylake``, ``shard-0|skylake``, or an inbox
    batch ``skylake-<batch id>`` (CPU names may hold hyphens; batch ids do not)."""
    if isinstance(key, dg.MultiPartitionKey):
        return key.keys_by_dimension["uarch"]
    name = getattr(partitions_def, "name", None)
    if name == UARCHS.name:
        return key
    if name == inbox.BATCHES.name:
        return key.rsplit("-", 1)[0]
    return None

"""Runs whose process died (SIGKILL, OOM, a closed laptop) stay "started" in the
Dagster instance and keep their ``duckdb_writer`` pool slot, so every later run
would wait for it forever. A run's process is known from its tags (``difftune
materialize`` sets them) or from the run worker's "started process" event (runs
launched from the UI); a run on this host whose process is gone is marked failed
and its slots freed: by ``difftune materialize`` before and while it waits, and
by a sensor while the daemon runs."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import dagster as dg

HOST_TAG, PID_TAG = "difftune/host", "difftune/pid"
# STARTING is left alone: its worker may be up before the run says so.
UNFINISHED = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def run_tags() -> dict[str, str]:
    """Tags naming the process that executes a run in-process."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def _run_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[int, float | None] | None:
    """(pid, a time by which that process had started; None: the run's creation)
    of the process executing ``run`` on this host, or None when it is unknown or on
    another host."""
    if PID_TAG in run.tags:
        if run.tags.get(HOST_TAG) != socket.gethostname() or not run.tags[PID_TAG].isdigit():
            return None
        return int(run.tags[PID_TAG]), None  # the process that created the run executes it
    if not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return None  # another launcher's workers run elsewhere (containers, other hosts)
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=20).records
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.engine_event_data if event is not None else None
        if data is not None and str(data.metadata.get("pid", dg.MetadataValue.text("")).value).isdigit():
            return int(data.metadata["pid"].value), record.event_log_entry.timestamp
    return None


def _process_alive(pid: int, since: float) -> bool:
    """Whether ``pid`` is a live process that started before ``since`` (a pid the
    kernel gave to a newer process is not the run's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return False  # a zombie: dead, not yet reaped by its parent
        with open("/proc/stat") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime"))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return started <= since + 2
    except (OSError, StopIteration, ValueError, IndexError):
        return True  # no /proc: trust the signal check


def reap_dead_runs(instance: dg.DagsterInstance) -> tuple[list[str], list[str]]:
    """Mark failed the started runs of this host whose process is gone and free
    their pool slots; free the slots still held by finished runs. Returns (the
    runs reaped, the finished runs whose slots were freed)."""
    reaped, freed = [], []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=UNFINISHED)):
        run = record.dagster_run
        process = _run_process(instance, run)
        if process is None:
            continue
        pid, started_by = process
        if pid == os.getpid() or _process_alive(pid, started_by or record.create_timestamp.timestamp()):
            continue
        instance.report_run_failed(run, message=f"the process of this run (pid {pid}) is gone: it was killed")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    holding = instance.event_log_storage.get_concurrency_run_ids()
    if holding:
        for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=list(holding))):
            if record.dagster_run.is_finished:
                instance.event_log_storage.free_concurrency_slots_for_run(record.dagster_run.run_id)
                freed.append(record.dagster_run.run_id)
    return reaped, freed


def wait_for_pool(
    instance: dg.DagsterInstance, pool: str, say: Callable[[str], None], poll_seconds: float = 1.0
) -> None:
    """Return once ``pool`` has a free slot, reaping dead runs meanwhile and saying
    which live run holds it. Interruptible (Ctrl-C, SIGTERM): it only sleeps."""
    said = None
    while True:
        reap_dead_runs(instance)
        info = instance.event_log_storage.get_concurrency_info(pool)
        if info.limit is None or len(info.claimed_slots) < info.limit:
            return
        holders = sorted(info.active_run_ids)
        if holders != said:
            names = []
            for run_id in holders:
                run = instance.get_run_by_id(run_id)
                process = _run_process(instance, run) if run is not None else None
                names.append(f"run {run_id[:8]}" + (f" (pid {process[0]})" if process else ""))
            say(f"waiting for pool {pool}: held by {', '.join(names)} (Ctrl-C stops waiting)")
            said = holders
        time.sleep(poll_seconds)


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def dead_run_reaper(context: dg.SensorEvaluationContext):
    """Marks failed the runs whose process was killed and frees their pool slots."""
    reaped, freed = reap_dead_runs(context.instance)
    return dg.SkipReason(
        f"marked failed (process gone): {', '.join(reaped) or 'none'}; slots freed of finished runs: "
        f"{', '.join(freed) or 'none'}"
    )

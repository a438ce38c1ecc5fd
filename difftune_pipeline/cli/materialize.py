"""Materialising the pipeline, quietly: one progress line while it runs, Dagster's
log in a file, one line for whatever stops it, and the results at the end."""

from __future__ import annotations

import atexit
import codecs
import contextlib
import os
import sys
import threading
import time
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

from difftune_pipeline.cli.common import USER_ERRORS, app, fail
from difftune_pipeline.engine import CPUS, LLVM_VERSION

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

# Dagster's console log at its most detailed: it goes to the log file (or with -v the terminal too).
EVERY_EVENT = {"loggers": {"console": {"config": {"log_level": "DEBUG"}}}}


@app.command()
def materialize(
    select: Annotated[str, typer.Option(help="Dagster asset selection")] = "*",
    uarch: Annotated[
        list[str] | None, typer.Option(help="only these µarchs' partitions (repeat the option); default: every one")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show Dagster's log here too")] = False,
) -> None:
    """Materialise assets of the pipeline into the Dagster instance (DAGSTER_HOME,
    else the project's .dagster_home/): unpartitioned assets in topological runs,
    partitioned ones one run per partition (every µarch with measurements, and each
    shard of its simulations). Shows progress, keeps Dagster's log in a file beside
    the warehouse, and ends with the results. Every setting is checked first.
    Runs left behind by a killed process are marked failed first and their pool slots freed."""
    from difftune_pipeline import environment  # (torch, through the settings: only for this command)
    from difftune_pipeline.cli.results import show

    try:
        environment.read(os.environ, probe=True)
    except USER_ERRORS as exc:
        raise fail(exc) from None
    unknown = [u for u in uarch or [] if u not in CPUS]
    if unknown:
        raise fail(ValueError(f"--uarch {', '.join(unknown)}: not a CPU LLVM {LLVM_VERSION} models"))
    graph, job, ordered = _selection(select)
    from difftune_pipeline import ui

    try:
        ui.instance_home()
    except OSError as exc:
        raise fail(
            OSError(f"DAGSTER_HOME={os.environ.get('DAGSTER_HOME', '')!r}: cannot hold an instance ({exc})")
        ) from None
    warehouse = environment.warehouse_path()
    log_path = warehouse.parent / "logs" / f"materialize-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.log"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(OSError(f"cannot write the run's log beside the warehouse {warehouse}: {exc}")) from None
    t0 = time.monotonic()
    with _captured(log_path, verbose) as terminal:
        # Lines are printed whole (a path or a reason stays one line to copy); the live bar
        # is cut to the width (its description ends in an ellipsis), so its height is known.
        screen = Console(file=terminal, highlight=False, soft_wrap=True)
        screen.print(f"[dim]Dagster's log: {escape(str(log_path))}{'' if verbose else '  (-v shows it here)'}[/dim]")
        try:
            status = _run(graph, job, ordered, uarch, screen, verbose)
        except KeyboardInterrupt:
            status = _interrupted(screen)
        except Exception as exc:  # outside any step (the instance, the warehouse): its trace goes to the log
            traceback.print_exc()
            message = _root_message(exc)
            screen.print(f"[red]failed:[/red] {escape(message)}")
            status = _status(type(_root(exc)).__name__)
        if status:
            screen.print(f"[dim]the full log: {escape(str(log_path))}[/dim]")
            raise typer.Exit(status)
        screen.print(f"[green]done[/green] in {_elapsed(time.monotonic() - t0)}")
    if not warehouse.exists():  # a selection that wrote nothing
        return
    print()
    try:
        show(warehouse, Console(highlight=False), uarchs=uarch or None)
    except USER_ERRORS as exc:
        raise fail(exc) from None


def _run(graph, job, ordered: list, uarchs: list[str] | None, screen: Console, verbose: bool) -> int:
    """Every run of the selection, in order, behind one progress line; the exit
    status (0, or the failure's after its one line)."""
    import dagster as dg

    from difftune_pipeline import environment
    from difftune_pipeline.defs import recovery
    from difftune_pipeline.defs.versions import Freshness

    groups = _groups(graph, ordered)
    groups_keys = [k for keys, _ in groups for k in keys]
    matched: set[str] = set()
    narrowed = False  # whether the selection has assets partitioned by µarch
    with dg.DagsterInstance.get() as instance:
        reaped, freed = recovery.reap_dead_runs(instance)
        for run_id in reaped:
            screen.print(f"run {run_id} was left by a killed process: marked failed, its pool slots freed")
        for run_id in freed:
            screen.print(f"run {run_id} had finished but still held a pool slot: freed")
        inbox_tags = _register(instance, groups_keys, screen)
        freshness = Freshness(instance, graph, environment.warehouse_path())
        with _progress(screen, disable=verbose) as bar:  # with -v the log scrolls past instead
            task = bar.add_task("", total=None)
            done = 0
            for i, (group_keys, partitions_def) in enumerate(groups):
                # partitions are read when their asset's turn comes: ingestion adds the µarchs
                partitions = [None] if partitions_def is None else _partitions(partitions_def, instance, uarchs)
                if getattr(partitions_def, "name", None) == "measurement_batches":  # only the inbox's batches to read
                    partitions = [p for p in partitions if p in inbox_tags]
                narrowed |= partitions_def is not None
                matched |= {u for u in uarchs or [] if any(_uarch_of(p, partitions_def) == u for p in partitions)}
                later = sum(_count(d, instance, uarchs) for _, d in groups[i + 1 :])
                bar.update(task, total=done + len(partitions) + later)
                names = ", ".join(k.to_user_string() for k in group_keys)
                started, current = time.monotonic(), 0
                for partition in partitions:
                    label = escape(names + (f" [{partition}]" if partition else ""))
                    bar.update(task, description=f"checking {label}", completed=done)
                    todo = _not_up_to_date(freshness, group_keys, partition)
                    if not todo:
                        current += 1
                        done += 1
                        continue
                    bar.update(task, description=f"materialising {label}", completed=done)
                    for pool in sorted(set().union(*(graph.get(k).pools for k in todo))):
                        recovery.wait_for_pool(instance, pool, lambda line: screen.print(escape(line)))
                    result = job.execute_in_process(
                        instance=instance,
                        asset_selection=todo,
                        partition_key=partition,
                        raise_on_error=False,
                        tags={**recovery.run_tags(), **inbox_tags.get(partition, {})},
                        run_config=EVERY_EVENT,
                    )
                    done += 1
                    bar.update(task, completed=done)
                    for event in result.get_asset_materialization_events():
                        warning = event.materialization.metadata.get("warning")
                        if warning is not None:
                            screen.print(f"[yellow]warning:[/yellow] {label}: {escape(str(warning.value))}")
                    if not result.success:
                        return _failed(screen, label, result)
                if partitions and current == len(partitions):
                    screen.print(f"[dim]=[/dim] {escape(names)}{_count_of(partitions)}  up to date: no step ran")
                elif partitions:  # (an inbox with no batch has none)
                    count = _count_of(partitions) + (f", {current} up to date" if current else "")
                    screen.print(f"[green]✓[/green] {escape(names)}{count}  {_elapsed(time.monotonic() - started)}")
    for missing in sorted(set(uarchs or []) - matched) if narrowed else []:
        screen.print(f"no partition of {missing}: it has no measurements, so nothing of it was materialised")
    return 0


def _count_of(partitions: list) -> str:
    return f" ({len(partitions)} partitions)" if len(partitions) > 1 else ""


def _not_up_to_date(freshness, keys: list, partition: str | None) -> list:
    """The assets of a run to materialise: from the first one not up to date on
    (what follows it reads what it writes); none when every one is up to date."""
    for i, key in enumerate(keys):
        if not freshness.up_to_date(key, partition):
            return keys[i:]
    return []


def _register(instance, keys: list, screen: Console) -> dict[str, dict[str, str]]:
    """Partitions the warehouse implies and the instance may lack (a fresh or another
    DAGSTER_HOME): each µarch with usable measurements, and, when the inbox's batches
    are selected, each settled inbox file not yet ingested (the inbox sensor's work,
    run once). Returns the tags of each inbox partition's run."""
    import dagster as dg

    from difftune_pipeline import environment
    from difftune_pipeline.defs import inbox
    from difftune_pipeline.defs.partitions import add_uarchs
    from difftune_pipeline.defs.resources import Inbox
    from difftune_pipeline.warehouse import ingestion

    warehouse = environment.warehouse_path()
    if warehouse.exists():
        add_uarchs(instance, ingestion.measured_uarchs(warehouse))
    if dg.AssetKey("measurement_batches") not in keys:
        return {}
    todo, waiting = inbox.pending(Inbox(path=str(environment.inbox_path())), str(warehouse))
    for line in waiting:
        screen.print(f"inbox: {escape(line)}")
    known = set(instance.get_dynamic_partitions(inbox.BATCHES.name))
    instance.add_dynamic_partitions(inbox.BATCHES.name, [k for k in todo if k not in known])
    return {k: dict(inbox.run_request(k, item, version).tags) for k, (item, version) in todo.items()}


@app.command()
def ingest(
    uarch: Annotated[list[str] | None, typer.Option(help="only these µarchs' folders of the inbox")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show Dagster's log here too")] = False,
) -> None:
    """Ingest what lies in the inbox (DIFFTUNE_INBOX, else warehouse/inbox/<mcpu>/*.csv)
    now, without the daemon: the inbox sensor's work, run once. Each settled file the
    warehouse has not ingested becomes a batch; a file still changing is named and left
    for the next time. The next `difftune materialize` re-tunes what it measured."""
    materialize(select="key:measurement_batches", uarch=uarch, verbose=verbose)


def _selection(select: str) -> tuple:
    """(asset graph, job, the selected asset keys in topological order); a
    selection that is not one, or matches nothing, is refused listing the assets."""
    import dagster as dg

    try:
        from difftune_pipeline.definitions import defs

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Dagster's beta notices belong in the log, not in front of the user
            definitions = defs()
            graph = definitions.resolve_asset_graph()
            job = definitions.resolve_implicit_global_asset_job_def()
    except Exception as exc:  # a definitions error is a tree of causes: its root is the one line to read
        raise fail(ValueError(f"the pipeline's definitions did not load: {_root_message(exc)}")) from None
    keys = ", ".join(sorted(k.to_user_string() for k in graph.materializable_asset_keys))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            selected = dg.AssetSelection.from_string(select).resolve(graph)
    except Exception as exc:  # the selection grammar raises several error types; all are the user's to read
        raise fail(
            ValueError(f"--select {select!r} is not an asset selection ({_root_message(exc)}); the assets: {keys}")
        ) from None
    ordered = [k for level in graph.toposorted_asset_keys_by_level for k in sorted(level) if k in selected]
    if not ordered:
        raise fail(ValueError(f"--select {select!r} matches no asset; the assets: {keys}"))
    return graph, job, ordered


def _failed(screen: Console, label: str, result) -> int:
    """One line for a failed run: the checks that failed, or the step's root error."""
    checks = [
        f"{e.asset_key.to_user_string()}:{e.check_name}" for e in result.get_asset_check_evaluations() if not e.passed
    ]
    if checks:
        screen.print(f"[red]failed:[/red] {label}: checks failed: {', '.join(checks)}")
        return 1
    errors = [e.step_failure_data.error for e in result.all_events if e.is_step_failure and e.step_failure_data.error]
    root = errors[0] if errors else None
    while root is not None and root.cause is not None:
        root = root.cause
    if root is None:
        screen.print(f"[red]failed:[/red] {label}")
        return 1
    if root.cls_name in INTERRUPTS:  # Ctrl-C inside a step: Dagster records it as the step's failure
        return _interrupted(screen)
    message = root.message.strip().splitlines()[0] if root.message.strip() else root.cls_name
    screen.print(f"[red]failed:[/red] {label}: {escape(message)}")
    return _status(root.cls_name)


def _status(cls_name: str) -> int:
    """2 when the machine is at fault (a full disk, a busy warehouse, a setting found wrong late), else 1."""
    return 2 if cls_name in ENVIRONMENT_ERRORS else 1


def _interrupted(screen: Console) -> int:
    screen.print("[red]interrupted[/red]: what was committed is kept; the next run goes on from there")
    return 130


def _root(exc: BaseException) -> BaseException:
    """The innermost cause: what a tree of wrapped errors comes down to."""
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    return exc


def _root_message(exc: BaseException) -> str:
    """The innermost cause's first line."""
    root = _root(exc)
    text = str(root).strip()
    return text.splitlines()[0] if text else type(root).__name__


def _elapsed(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _progress(screen: Console, disable: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
        console=screen,
        transient=True,
        disable=disable,
        redirect_stdout=False,  # what the runs print belongs in the log, not above the bar
        redirect_stderr=False,
    )


@contextlib.contextmanager
def _captured(path: Path, verbose: bool):
    """While the runs go, everything written to stdout and stderr (Dagster's log,
    warnings, what Ray and LLVM print, at the file-descriptor level) lands in
    ``path``, and with ``verbose`` on the terminal too. Yields the terminal's
    stream, for progress and results."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    terminal, own_terminal = _terminal()
    log = open(path, "ab", buffering=0)
    copier = None
    if verbose:
        read_end, target = os.pipe()
        copier = threading.Thread(target=_tee, args=(read_end, log, terminal), daemon=True)
        copier.start()
    else:
        target = log.fileno()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    previous = sys.stdout, sys.stderr
    stream = open(os.dup(target), "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        for fd in (1, 2):
            os.dup2(target, fd)
        sys.stdout = sys.stderr = stream
        yield terminal
    finally:
        with contextlib.suppress(OSError):
            stream.flush()
        sys.stdout, sys.stderr = previous
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        with contextlib.suppress(OSError):  # a log on a full disk loses its tail, not the run's outcome
            stream.close()
        if copier is not None:
            os.close(target)
            copier.join(timeout=5)  # processes that inherited the pipe (Ray's) may hold it open longer
        else:
            with contextlib.suppress(OSError):
                log.close()
        terminal.flush()
        if own_terminal and copier is not None and copier.is_alive():
            atexit.register(terminal.close)  # the copier writes on while Ray's processes hold the pipe
        elif own_terminal:
            terminal.close()


def _terminal():
    """(stream, whether it is ours to close): where the user sees output, a copy of the
    real stderr (its descriptor is about to point at the log), or the stream that
    stands in for it (in tests)."""
    try:
        if sys.stderr.fileno() == 2:
            return open(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace"), True
    except (AttributeError, OSError, ValueError):
        pass
    return sys.stderr, False


def _tee(read_end: int, log, terminal) -> None:
    """Copy what the runs write to the log file and the terminal until every writer
    closed the pipe. A sink that fails (a full disk, a closed terminal) is dropped;
    the pipe is still drained, so a writer never blocks or breaks on it."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two chunks
    sinks = {"log": log, "terminal": terminal}
    with open(read_end, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            text = decoder.decode(chunk)
            for name, sink in list(sinks.items()):
                try:
                    if name == "log":
                        sink.write(chunk)
                    else:
                        sink.write(text)
                        sink.flush()
                except (OSError, ValueError):
                    del sinks[name]
    with contextlib.suppress(OSError):
        log.close()


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
    import dagster as dg

    from difftune_pipeline.defs.inbox import BATCHES
    from difftune_pipeline.defs.partitions import UARCHS

    if isinstance(key, dg.MultiPartitionKey):
        return key.keys_by_dimension["uarch"]
    name = getattr(partitions_def, "name", None)
    if name == UARCHS.name:
        return key
    if name == BATCHES.name:
        return key.rsplit("-", 1)[0]
    return None

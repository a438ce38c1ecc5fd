"""Materialising the pipeline, quietly: one progress line while it runs, Dagster's
log in a file, one line for whatever stops it, and the results at the end. The
runs themselves are ``defs.runner``'s."""

from __future__ import annotations

import os
import time
import traceback
import warnings
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column

from difftune_pipeline.cli.capture import captured
from difftune_pipeline.cli.common import app, fail, user_errors
from difftune_pipeline.engine import CPUS, LLVM_VERSION


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
    from difftune_pipeline import environment, ui  # (torch and Dagster: only for this command)
    from difftune_pipeline.cli.results import show

    with warnings.catch_warnings():  # Dagster's preview notices, as the definitions load, belong in the log
        warnings.simplefilter("ignore")
        from difftune_pipeline.defs import runner

    with user_errors():
        environment.read(os.environ, probe=True)
    unknown = [u for u in uarch or [] if u not in CPUS]
    if unknown:
        raise fail(ValueError(f"--uarch {', '.join(unknown)}: not a CPU LLVM {LLVM_VERSION} models"))
    try:
        plan = runner.plan(select)
        ui.instance_home()
    except ValueError as exc:
        raise fail(exc) from None
    except OSError as exc:
        home = os.environ.get("DAGSTER_HOME", "")
        raise fail(OSError(f"DAGSTER_HOME={home!r}: cannot hold an instance ({exc})")) from None
    warehouse = environment.warehouse_path()
    log_path = warehouse.parent / "logs" / f"materialize-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.log"
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(OSError(f"cannot write the run's log beside the warehouse {warehouse}: {exc}")) from None
    t0 = time.monotonic()
    with captured(log_path, verbose) as terminal:
        # Lines are printed whole (a path or a reason stays one line to copy); the live bar
        # is cut to the width (its description ends in an ellipsis), so its height is known.
        screen = Console(file=terminal, highlight=False, soft_wrap=True)
        screen.print(f"[dim]Dagster's log: {escape(str(log_path))}{'' if verbose else '  (-v shows it here)'}[/dim]")
        with _progress(screen, disable=verbose) as bar:  # with -v the log scrolls past instead
            try:
                failed = runner.run(plan, uarch, _shown(screen, bar, bar.add_task("", total=None)))
            except KeyboardInterrupt as exc:
                failed = runner.failure(exc)
            except Exception as exc:  # outside any step (the instance, the warehouse): its trace goes to the log
                traceback.print_exc()
                failed = runner.failure(exc)
        if failed:
            if failed.status == runner.INTERRUPTED:
                screen.print("[red]interrupted[/red]: what was committed is kept; the next run goes on from there")
            else:
                screen.print(f"[red]failed:[/red] {escape(failed.message)}")
            screen.print(f"[dim]the full log: {escape(str(log_path))}[/dim]")
            raise typer.Exit(failed.status)
        screen.print(f"[green]done[/green] in {_elapsed(time.monotonic() - t0)}")
    if not warehouse.exists():  # a selection that wrote nothing
        return
    print()
    with user_errors():
        show(warehouse, Console(highlight=False), uarchs=uarch or None)


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


def _shown(screen: Console, bar: Progress, task):
    """The runner's events, on the screen: notices as lines, progress on the bar, a line per asset."""
    from difftune_pipeline.defs import runner

    def show(event) -> None:
        if isinstance(event, runner.Notice):
            screen.print(f"[yellow]warning:[/yellow] {escape(event.text)}" if event.warning else escape(event.text))
        elif isinstance(event, runner.Progress):
            description = escape(event.description) if event.description else None
            bar.update(task, completed=event.done, total=event.total, description=description)
        elif event.up_to_date == event.partitions:
            screen.print(f"[dim]=[/dim] {escape(event.names)}{_count_of(event.partitions)}  up to date: no step ran")
        else:
            count = _count_of(event.partitions) + (f", {event.up_to_date} up to date" if event.up_to_date else "")
            screen.print(f"[green]✓[/green] {escape(event.names)}{count}  {_elapsed(event.seconds)}")

    return show


def _count_of(partitions: int) -> str:
    return f" ({partitions} partitions)" if partitions > 1 else ""


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

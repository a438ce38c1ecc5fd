"""The pipeline and its warehouse: materialise, query, report, the UI."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from difftune_pipeline.cli.common import (
    USER_ERRORS,
    WarehouseOpt,
    app,
    console,
    err_console,
    fail,
    plain,
    print_json,
    progress,
)
from difftune_pipeline.engine import CPUS, LLVM_VERSION
from difftune_pipeline.warehouse import DEFAULT_PATH
from difftune_pipeline.warehouse.connection import user_query


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run on the warehouse (read-only)")],
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_csv: Annotated[bool, typer.Option("--csv")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="seconds before the query is stopped (writers wait while it runs)")
    ] = 300.0,
) -> None:
    """Query the warehouse: one statement that only reads (a query, DESCRIBE, SHOW,
    SUMMARIZE, EXPLAIN). Nothing outside the warehouse is reachable and nothing can be written."""
    try:
        columns, rows = user_query(query, warehouse, timeout)
    except USER_ERRORS as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        raise fail(InterruptedError("interrupted")) from None
    if as_csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(columns)
        out.writerows([plain(v) for v in row] for row in rows)
    elif as_json:
        print_json([dict(zip(columns, row)) for row in rows])
    else:
        table = Table()
        for col in columns:
            table.add_column(Text(col))
        for row in rows:
            table.add_row(*(Text(plain(v)) for v in row))
        console.print(table)


@app.command()
def materialize(
    select: Annotated[str, typer.Option(help="Dagster asset selection")] = "*",
    uarch: Annotated[
        list[str] | None, typer.Option(help="only these µarchs' partitions (repeat the option); default: every one")
    ] = None,
) -> None:
    """Materialise assets of the pipeline into the persistent Dagster instance:
    unpartitioned assets in topological runs, partitioned ones one run per partition
    (every µarch with measurements, and each shard of its simulations).
    Runs left behind by a killed process are marked failed first and their pool slots freed."""
    import dagster as dg

    from difftune_pipeline.definitions import defs
    from difftune_pipeline.defs import recovery

    definitions = defs()
    graph = definitions.resolve_asset_graph()
    job = definitions.resolve_implicit_global_asset_job_def()
    try:
        selected = dg.AssetSelection.from_string(select).resolve(graph)
    except Exception as exc:  # the selection grammar raises several error types; all are the user's to read
        raise fail(
            ValueError(f"bad asset selection {select!r} (e.g. 'key:learned_params or key:evaluation'): {exc}")
        ) from None
    ordered = [k for level in graph.toposorted_asset_keys_by_level for k in sorted(level) if k in selected]
    unknown = [u for u in uarch or [] if u not in CPUS]
    if unknown:
        raise fail(ValueError(f"--uarch {', '.join(unknown)}: not a CPU LLVM {LLVM_VERSION} models"))
    matched: set[str] = set()
    narrowed = False  # whether the selection has assets partitioned by µarch
    with dg.DagsterInstance.get() as instance, progress() as bar:
        reaped, freed = recovery.reap_dead_runs(instance)
        for run_id in reaped:
            err_console.print(f"run {run_id} was left by a killed process: marked failed, its pool slots freed")
        for run_id in freed:
            err_console.print(f"run {run_id} had finished but still held a pool slot: freed")
        task = bar.add_task("runs", total=None)
        done = 0
        for keys, partitions_def in _groups(graph, ordered):
            # partitions are read when their asset's turn comes: ingestion adds the µarchs
            partitions = [None] if partitions_def is None else _partitions(partitions_def, instance, uarch)
            narrowed |= partitions_def is not None
            matched |= {u for u in uarch or [] if any(_uarch_of(p, partitions_def) == u for p in partitions)}
            for partition in partitions:
                names = escape(", ".join(k.to_user_string() for k in keys) + (f" [{partition}]" if partition else ""))
                bar.update(task, description=f"materialising {names}", completed=done)
                for pool in sorted(set().union(*(graph.get(k).pools for k in keys))):
                    recovery.wait_for_pool(instance, pool, lambda line: err_console.print(escape(line)))
                result = job.execute_in_process(
                    instance=instance,
                    asset_selection=keys,
                    partition_key=partition,
                    raise_on_error=False,
                    tags=recovery.run_tags(),
                )
                done += 1
                if not result.success:
                    failed = [
                        f"{e.asset_key.to_user_string()}:{e.check_name}"
                        for e in result.get_asset_check_evaluations()
                        if not e.passed
                    ]
                    err_console.print(
                        f"[red]failed:[/red] {names}" + (f" (checks failed: {', '.join(failed)})" if failed else "")
                    )
                    raise typer.Exit(1)
                console.print(f"materialised [bold]{names}[/bold]")
    for missing in sorted(set(uarch or []) - matched) if narrowed else []:
        err_console.print(f"no partition of {missing}: it has no measurements, so nothing of it was materialised")


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


@app.command()
def report(
    out: Annotated[Path, typer.Option(help="HTML file to write")] = Path("warehouse/reports/report.html"),
    warehouse: WarehouseOpt = DEFAULT_PATH,
) -> None:
    """Write the HTML report: default against learned per µarch and slice, ML
    kernels against the rest, the predicted-vs-measured plot, moved parameters."""
    from difftune_pipeline.reporting import report as report_

    try:
        path = report_.build(warehouse, out)
    except USER_ERRORS as exc:
        raise fail(exc) from None
    console.print(f"wrote {escape(str(path))}")


@app.command()
def ui(
    host: str = "127.0.0.1",
    port: int = 3000,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the code location to load")] = 300,
) -> None:
    """Start the Dagster UI and daemon (sensors, schedules, automation) on the
    project's instance; waits until the pipeline has loaded, then serves until Ctrl-C."""
    import signal

    from difftune_pipeline import ui as ui_

    def interrupt(*_):
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):  # also when started with SIGINT ignored (in the background)
        signal.signal(sig, interrupt)
    process = ui_.start(host, port)
    url = f"http://{host}:{port}"
    try:
        with err_console.status(f"starting the UI at {url}"):
            ui_.wait_until_loaded(url, timeout, process)
        console.print(f"the pipeline is loaded: open {url}  (Ctrl-C stops the UI and the daemon)")
        process.wait()
    except (RuntimeError, TimeoutError) as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        ui_.stop(process)

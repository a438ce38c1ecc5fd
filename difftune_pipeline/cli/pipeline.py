"""The pipeline's warehouse and UI: query, report, the UI."""

from __future__ import annotations

import csv
import os
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
    user_errors,
)
from difftune_pipeline.warehouse import DEFAULT_PATH
from difftune_pipeline.warehouse.user_query import QueryLimits, user_query


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run on the warehouse (read-only)")],
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_csv: Annotated[bool, typer.Option("--csv")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    timeout: Annotated[
        float, typer.Option(min=0.001, help="seconds before the query is stopped (writers wait while it runs)")
    ] = 300.0,
    memory_limit: Annotated[
        str | None, typer.Option(help="memory the query may hold (default: DIFFTUNE_QUERY_MEMORY, else 2GB)")
    ] = None,
    temp_limit: Annotated[
        str | None, typer.Option(help="disk it may spill to (default: DIFFTUNE_QUERY_TEMP, else 8GB)")
    ] = None,
) -> None:
    """Query the warehouse: one statement that only reads (a query, DESCRIBE, SHOW,
    SUMMARIZE, EXPLAIN). Nothing outside the warehouse is reachable and nothing can be
    written; a query that passes its time, memory or temporary-disk limit is stopped."""
    from difftune_pipeline import environment

    try:
        memory, temp = environment.query_sizes(memory=memory_limit, temp=temp_limit)
        columns, rows = user_query(query, warehouse, QueryLimits(timeout, memory, temp))
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
def report(
    out: Annotated[Path, typer.Option(help="HTML file to write")] = Path("warehouse/reports/report.html"),
    warehouse: WarehouseOpt = DEFAULT_PATH,
) -> None:
    """Write the HTML report: default against learned per µarch and slice, ML
    kernels against the rest, the predicted-vs-measured plot, moved parameters."""
    from difftune_pipeline.reporting import report as report_

    with user_errors():
        path = report_.build(warehouse, out)
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

    from difftune_pipeline import environment
    from difftune_pipeline import ui as ui_

    with user_errors():
        environment.read(os.environ, probe=True)  # a bad setting is one line here, not a load error in the UI

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

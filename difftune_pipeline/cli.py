"""The ``difftune`` command."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from difftune_pipeline import store

app = typer.Typer(help="DiffTune pipeline: tune llvm-mca's scheduling parameters from measured throughputs.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
params_app = typer.Typer(help="Parameter tables.", no_args_is_help=True)
app.add_typer(params_app, name="params")
console = Console()
progress_console = Console(stderr=True)  # progress never mixes with --json/--csv output on stdout
CHUNK = 256


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(2)


def progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=progress_console, transient=True)

WarehouseOpt = Annotated[Path, typer.Option("--warehouse", envvar="DIFFTUNE_WAREHOUSE", help="DuckDB file")]


def _read_inputs(csv: Path | None, hex_: list[str] | None, asm: Path | None):
    """(label, hex or None, asm text or None, measured or None, problem or None) per input."""
    items = []
    if csv is not None:
        for line_no, line in enumerate(csv.read_text(errors="replace").splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split(",")
            measured, problem = None, None
            if len(fields) > 2:
                problem = f"line {line_no}: expected 'hex[,cycles per 100 iterations]'"
            elif len(fields) == 2:
                try:
                    measured = float(fields[1])
                    if not math.isfinite(measured) or measured <= 0:
                        raise ValueError
                except ValueError:
                    problem = f"line {line_no}: measured throughput {fields[1]!r} is not a positive number"
            items.append((fields[0].strip(), fields[0].strip(), None, measured, problem))
    for h in hex_ or []:
        items.append((h, h, None, None, None))
    if asm is not None:
        items.append((str(asm), None, asm.read_text(), None, None))
    if not items:
        raise typer.BadParameter("give --csv, --hex or --asm")
    return items


def run_table(mcpu: str, params: Path | None, items, iterations: int, threads: int | None) -> dict:
    """Simulate inputs under a table: the shared core of ``simulate`` and ``evaluate``."""
    from difftune_pipeline.engine import Engine, ParamTable
    from difftune_pipeline.evaluate import kendall_tau, mape

    engine = Engine(mcpu)
    table = ParamTable.from_json(params) if params else None
    if table is not None:
        engine.compile(table)  # refuse an invalid table up front, naming opcode and parameter
    blocks = [engine.parse_asm(a) if a is not None else engine.disassemble(h) for _, h, a, _, _ in items]
    cycles_, status_ = [], []
    with progress() as bar:
        task = bar.add_task(f"simulating (-mcpu={mcpu})", total=len(blocks))
        for start in range(0, len(blocks), CHUNK):
            result = engine.simulate(blocks[start:start + CHUNK], table, iterations=iterations, threads=threads)
            cycles_ += result.cycles.tolist()
            status_ += list(result.status)
            bar.advance(task, len(result.status))
    rows = []
    for (label, h, _, measured, problem), block, cycles, status in zip(items, blocks, cycles_, status_):
        if problem:
            status, cycles = f"bad input: {problem}", -1
        rows.append({"input": label, "asm": list(block.asm), "cycles": int(cycles) if status == "ok" else None,
                     "measured": measured, "status": status})
    scored = [(r["cycles"], r["measured"]) for r in rows if r["cycles"] is not None and r["measured"] is not None]
    return {
        "mcpu": mcpu, "llvm_version": engine.llvm_version, "iterations": iterations,
        "params": str(params) if params else "default",
        "n": len(rows), "failed": sum(r["status"] != "ok" for r in rows),
        "mape": mape(*zip(*scored)) if scored else None,
        "kendall_tau": kendall_tau(*zip(*scored)) if len(scored) > 1 else None,
        "results": rows,
    }


def _print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=1, allow_nan=False, default=lambda x: None))
        return
    table = Table(title=f"llvm-mca {report['llvm_version']} -mcpu={report['mcpu']}, {report['iterations']} iterations")
    for col in ("input", "cycles", "measured", "status"):
        table.add_column(col, overflow="fold")
    for r in report["results"]:
        table.add_row(r["input"][:40], str(r["cycles"] if r["cycles"] is not None else "-"),
                      f"{r['measured']:g}" if r["measured"] is not None else "-", r["status"])
    console.print(table)
    summary = f"n={report['n']} failed={report['failed']}"
    if report["mape"] is not None:
        summary += f" MAPE={100 * report['mape']:.2f}%"
    if report["kendall_tau"] is not None:
        summary += f" Kendall tau={report['kendall_tau']:.3f}"
    console.print(summary)


def _run_and_print(mcpu, params, inputs, iterations, threads, as_json) -> None:
    from difftune_pipeline.engine import InvalidTable

    try:
        report = run_table(mcpu, params, inputs(), iterations, threads)
    except (InvalidTable, ValueError, OSError) as exc:
        raise _fail(exc) from None
    _print_report(report, as_json)


@app.command()
def simulate(
    mcpu: Annotated[str, typer.Option(help="LLVM CPU name (haswell, skylake, znver1, ...)")] = "haswell",
    params: Annotated[Optional[Path], typer.Option(help="parameter table JSON (default: LLVM's)")] = None,
    csv: Annotated[Optional[Path], typer.Option(help="file of hex[,measured cycles per 100 iterations]")] = None,
    hex_: Annotated[Optional[list[str]], typer.Option("--hex", help="a block as hex (repeatable)")] = None,
    asm: Annotated[Optional[Path], typer.Option(help="a block as AT&T assembly text")] = None,
    iterations: int = 100,
    threads: Annotated[Optional[int], typer.Option(help="simulation threads (default: all cores)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Simulate blocks with the in-process engine: cycles per block, and MAPE and
    Kendall tau when measurements are given."""
    _run_and_print(mcpu, params, lambda: _read_inputs(csv, hex_, asm), iterations, threads, as_json)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL to run on the warehouse (read-only)")],
    warehouse: WarehouseOpt = store.DEFAULT_PATH,
    as_csv: Annotated[bool, typer.Option("--csv")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Query the warehouse. The connection is read-only: statements that write fail."""
    try:
        frame = store.query(query, warehouse)
    except Exception as exc:  # duckdb raises many error types; all are the user's to read
        raise _fail(exc) from None
    if as_csv:
        sys.stdout.write(frame.write_csv())
    elif as_json:
        print(json.dumps(frame.to_dicts(), default=str, indent=1))
    else:
        table = Table()
        for col in frame.columns:
            table.add_column(col)
        for row in frame.iter_rows():
            table.add_row(*("" if v is None else str(v) for v in row))
        console.print(table)


def _load_table(ref: str, mcpu: str, warehouse: Path):
    """A table by reference: a JSON file, 'default' (LLVM's), 'learned' (the newest
    learned table of ``mcpu`` in the warehouse) or a warehouse table id."""
    from difftune_pipeline.engine import Engine, ParamTable

    if Path(ref).is_file():
        return ref, ParamTable.from_json(Path(ref))
    if ref == "default":
        return ref, Engine(mcpu).default_table()
    if ref == "learned":
        latest = store.query("SELECT table_id FROM param_tables WHERE kind = 'learned' AND mcpu = ? "
                             "ORDER BY created_at DESC LIMIT 1", warehouse, [mcpu])
        if latest.is_empty():
            raise KeyError(f"no learned table for -mcpu={mcpu} in {warehouse}")
        ref = latest["table_id"][0]
    return ref, store.load_table(ref, warehouse)


TableRef = Annotated[str, typer.Argument(help="a JSON file, 'default' (LLVM's), 'learned' (the newest learned "
                                              "table for --mcpu) or a warehouse table id")]


@params_app.command("export")
def params_export(
    out: Annotated[Path, typer.Option(help="JSON file to write")],
    mcpu: str = "haswell",
    table: Annotated[str, typer.Option(help="'default' (LLVM's), 'learned' (the newest learned table "
                                           "for --mcpu in the warehouse) or a table id")] = "default",
    warehouse: WarehouseOpt = store.DEFAULT_PATH,
) -> None:
    """Write a parameter table as JSON that the engine imports."""
    try:
        name, t = _load_table(table, mcpu, warehouse)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise _fail(exc) from None
    t.to_json(out)
    console.print(f"wrote {escape(name)}: {len(t.rows)} opcodes of -mcpu={t.mcpu} (LLVM {t.llvm_version}) to {out}")


@params_app.command("import")
def params_import(
    file: Annotated[Path, typer.Argument(help="parameter table JSON (the format `params export` writes)")],
    table_id: Annotated[Optional[str], typer.Option("--id", help="table id (default: imported-<mcpu>-<hash>)")] = None,
    note: Annotated[str, typer.Option(help="a note stored with the table")] = "",
    warehouse: WarehouseOpt = store.DEFAULT_PATH,
) -> None:
    """Store a table in the warehouse (kind 'imported') after the engine has
    validated every parameter, so it can be diffed, exported and evaluated by id."""
    from difftune_pipeline.engine import Engine, InvalidTable, ParamTable

    try:
        table = ParamTable.from_json(file)
        Engine(table.mcpu).compile(table)
    except (InvalidTable, ValueError, KeyError, OSError) as exc:
        raise _fail(exc) from None
    table_id = table_id or f"imported-{table.mcpu}-{table.fingerprint()}"
    with store.writer(warehouse) as con:
        new = store.save_table(con, table_id, table, kind="imported", note=note or f"imported from {file}")
    console.print(f"{'stored' if new else 'already stored'}: {escape(table_id)} ({len(table.rows)} opcodes, -mcpu={table.mcpu})")


@params_app.command("diff")
def params_diff(
    table: TableRef,
    against: Annotated[str, typer.Option(help="the table to compare with (same forms as TABLE)")] = "default",
    mcpu: str = "haswell",
    warehouse: WarehouseOpt = store.DEFAULT_PATH,
    as_csv: Annotated[bool, typer.Option("--csv")] = False,
) -> None:
    """The parameters where TABLE differs from the defaults (or --against), one row each."""
    from difftune_pipeline.engine.table import diff

    try:
        name, t = _load_table(table, mcpu, warehouse)
        base_name, base = _load_table(against, t.mcpu, warehouse)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise _fail(exc) from None
    frame = diff(base, t)
    if as_csv:
        sys.stdout.write(frame.write_csv())
        return
    out = Table(title=f"{escape(name)} against {escape(base_name)}: {frame.height} parameters differ")
    for col in frame.columns:
        out.add_column(col, justify="left" if col in ("opcode", "param") else "right")
    for row in frame.iter_rows():
        out.add_row(*("-" if v is None else escape(str(v)) for v in row))
    console.print(out)


@app.command()
def evaluate(
    csv: Annotated[Path, typer.Option(help="file of hex,measured cycles per 100 iterations")],
    params: Annotated[Optional[Path], typer.Option(help="parameter table JSON (default: LLVM's)")] = None,
    mcpu: str = "haswell",
    iterations: int = 100,
    threads: Annotated[Optional[int], typer.Option(help="simulation threads (default: all cores)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """MAPE and Kendall tau of a parameter table against measured throughputs
    (the same output as ``simulate``)."""
    _run_and_print(mcpu, params, lambda: _read_inputs(csv, None, None), iterations, threads, as_json)


@app.command()
def materialize(
    select: Annotated[str, typer.Option(help="Dagster asset selection")] = "*",
) -> None:
    """Materialise assets of the pipeline into the persistent Dagster instance:
    unpartitioned assets in topological runs, partitioned ones one run per partition."""
    import dagster as dg

    from difftune_pipeline.definitions import defs

    definitions = defs()
    graph = definitions.resolve_asset_graph()
    job = definitions.resolve_implicit_global_asset_job_def()
    try:
        selected = dg.AssetSelection.from_string(select).resolve(graph)
    except Exception as exc:  # the selection grammar raises several error types; all are the user's to read
        raise _fail(ValueError(f"bad asset selection {select!r} (e.g. 'key:learned_params or key:evaluation'): {exc}")) from None
    ordered = [k for level in graph.toposorted_asset_keys_by_level for k in sorted(level) if k in selected]
    with dg.DagsterInstance.get() as instance, progress() as bar:
        runs: list[tuple[list, str | None]] = []
        for key in ordered:
            partitions = graph.get(key).partitions_def
            if partitions is None:
                if runs and runs[-1][1] is None:
                    runs[-1][0].append(key)
                else:
                    runs.append(([key], None))
            else:
                runs += [([key], p) for p in partitions.get_partition_keys(dynamic_partitions_store=instance)]
        task = bar.add_task("runs", total=len(runs))
        for keys, partition in runs:
            names = escape(", ".join(k.to_user_string() for k in keys) + (f" [{partition}]" if partition else ""))
            bar.update(task, description=f"materialising {names}")
            result = job.execute_in_process(instance=instance, asset_selection=keys, partition_key=partition,
                                            raise_on_error=False)
            bar.advance(task)
            if not result.success:
                failed = [f"{e.asset_key.to_user_string()}:{e.check_name}" for e in result.get_asset_check_evaluations()
                          if not e.passed]
                console.print(f"[red]failed:[/red] {names}" + (f" (checks failed: {', '.join(failed)})" if failed else ""))
                raise typer.Exit(1)
            console.print(f"materialised [bold]{names}[/bold]")


@app.command()
def report(
    out: Annotated[Path, typer.Option(help="HTML file to write")] = Path("warehouse/reports/report.html"),
    warehouse: WarehouseOpt = store.DEFAULT_PATH,
) -> None:
    """Write the HTML report: default against learned per µarch and slice, ML
    kernels against the rest, the predicted-vs-measured plot, moved parameters."""
    from difftune_pipeline import report as report_

    try:
        path = report_.build(warehouse, out)
    except (ValueError, KeyError, OSError) as exc:
        raise _fail(exc) from None
    console.print(f"wrote {path}")


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
        with progress_console.status(f"starting the UI at {url}"):
            ui_.wait_until_loaded(url, timeout, process)
        console.print(f"the pipeline is loaded: open {url}  (Ctrl-C stops the UI and the daemon)")
        process.wait()
    except (RuntimeError, TimeoutError) as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        pass
    finally:
        ui_.stop(process)

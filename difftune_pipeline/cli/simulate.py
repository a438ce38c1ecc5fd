"""Simulating blocks under a table, and scoring a table against measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from difftune_pipeline.cli.common import (
    CHUNK,
    MAX_ASM_BYTES,
    MAX_CSV_BYTES,
    app,
    console,
    path_text,
    print_json,
    progress,
    read_input,
    user_errors,
)
from difftune_pipeline.ingest.blocks import canonical_hex, hex_problem
from difftune_pipeline.ingest.rows import THROUGHPUT_BOUNDS, parse_number

Iterations = Annotated[int, typer.Option(min=1, max=2**31 - 1, help="iterations of the block to simulate")]
Threads = Annotated[int | None, typer.Option(min=1, max=1024, help="simulation threads (default: all cores)")]


Model = Annotated[
    str | None,
    typer.Option(
        help="simulator: llvm-mca, extended, or llvm-mca+front_end+memory+stack_engine (default: the table's)"
    ),
]
Harness = Annotated[
    str | None,
    typer.Option("--harness", help="where memory addresses come from: bhive, nanobench or none (default: the table's)"),
]
Measure = Annotated[
    str,
    typer.Option(
        help="what is scored against measurements: steady (cycles per 100 iterations once fill and drain cancel,"
        " as BHive measures) or total (llvm-mca's Total Cycles)"
    ),
]


def _read_inputs(csv: Path | None, hex_: list[str] | None, asm: Path | None):
    """(label, hex or None, asm text or None, measured or None, problem or None) per input."""
    items = []
    if csv is not None:
        text = read_input(csv, MAX_CSV_BYTES)
        for line_no, line in enumerate(text.split("\n"), start=1):  # only \n ends a line, as in ingestion
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            fields = line.split(",")
            measured, problem = None, hex_problem(canonical_hex(fields[0]))
            if len(fields) > 2:
                problem = "expected 'hex[,cycles per 100 iterations]'"
            elif len(fields) == 2 and problem is None:
                measured, problem = parse_number(fields[1].strip(), "measured throughput", bounds=THROUGHPUT_BOUNDS)
            items.append(
                (fields[0].strip(), fields[0].strip(), None, measured, problem and f"line {line_no}: {problem}")
            )
        if not items:
            raise ValueError(f"{csv} has no blocks (expected lines 'hex[,cycles per 100 iterations]')")
    for h in hex_ or []:
        items.append((h, h, None, None, hex_problem(canonical_hex(h))))
    if asm is not None:
        items.append((path_text(asm), None, read_input(asm, MAX_ASM_BYTES), None, None))
    if not items:
        raise typer.BadParameter("give --csv, --hex or --asm")
    return items


def run_table(
    mcpu: str,
    params: Path | None,
    items,
    iterations: int,
    threads: int | None,
    model: str | None = None,
    harness_name: str | None = None,
    measure: str = "steady",
) -> dict:
    """Simulate inputs under a table, with the model and harness it records unless
    ``model``/``harness_name`` say otherwise, scored by ``measure``: the shared core
    of ``simulate`` and ``evaluate``."""
    from difftune_pipeline import harness
    from difftune_pipeline.engine import Engine, ParamTable, check_measure, extended
    from difftune_pipeline.model.metrics import kendall_tau, mape
    from difftune_pipeline.warehouse.simulations import PREDICTED

    check_measure(measure, "--measure")

    engine = Engine(mcpu)
    table = ParamTable.from_json(params) if params else None
    blocks = [engine.parse_asm(a) if a is not None else engine.disassemble(h) for _, h, a, _, _ in items]
    if model is not None or harness_name is not None:
        mechanisms = extended.parse(model, mcpu) if model is not None else table.mechanisms if table else ()
        if mechanisms is None:
            raise ValueError("--model auto chooses on a pipeline's val split: name a model here")
        llvm = engine.default_table(blocks)
        base = table or llvm
        table = base.with_model(mechanisms, harness_name or (table.harness if table else "none"), llvm=llvm)
    if table is not None:
        engine.compile(table)  # refuse an invalid table up front, naming opcode and parameter
    fallbacks = 0
    if table is not None and "memory" in table.mechanisms:
        found = [harness.accesses(b, table.harness) for b in blocks]
        fallbacks = sum(a.status != "ok" for a in found if a.harness != table.harness)
        blocks = [a.attach(b) for a, b in zip(found, blocks)]
    cycles_, steady_, status_ = [], [], []
    with progress() as bar:
        task = bar.add_task(f"simulating (-mcpu={mcpu})", total=len(blocks))
        for start in range(0, len(blocks), CHUNK):
            result = engine.simulate(blocks[start : start + CHUNK], table, iterations=iterations, threads=threads)
            cycles_ += result.cycles.tolist()
            steady_ += result.steady.tolist()
            status_ += list(result.status)
            bar.advance(task, len(result.status))
    rows = []
    for (label, _, _, measured, problem), block, cycles, steady, status in zip(
        items, blocks, cycles_, steady_, status_
    ):
        if problem:
            status = f"bad input: {problem}"
        ok = status == "ok"
        rows.append(
            {
                "input": label,
                "asm": list(block.asm),
                "cycles": int(cycles) if ok else None,
                "steady_cycles_per_100": round(steady, 4) if ok else None,
                "measured": measured,
                "status": status,
            }
        )
    column = PREDICTED[measure]
    scored = [(r[column], r["measured"]) for r in rows if r[column] is not None and r["measured"] is not None]
    return {
        "mcpu": mcpu,
        "llvm_version": engine.llvm_version,
        "iterations": iterations,
        "measure": measure,
        "params": str(params) if params else "default",
        "model": table.model if table is not None else extended.PLAIN,
        "harness_fallbacks": fallbacks,
        "n": len(rows),
        "failed": sum(r["status"] != "ok" for r in rows),
        "mape": mape(*zip(*scored)) if scored else None,
        "kendall_tau": kendall_tau(*zip(*scored)) if scored else None,
        "results": rows,
    }


def _print_report(report: dict, as_json: bool) -> None:
    from difftune_pipeline.engine import MEASURES

    if as_json:
        print_json(report)
        return
    table = Table(
        title=f"{report['model']} (LLVM {report['llvm_version']}) -mcpu={report['mcpu']}, "
        f"{report['iterations']} iterations"
    )
    for col in ("input", "steady /100 it.", "total cycles", "measured", "status"):
        table.add_column(col, overflow="fold")
    for r in report["results"]:
        table.add_row(
            Text(r["input"][:40]),
            f"{r['steady_cycles_per_100']:g}" if r["steady_cycles_per_100"] is not None else "-",
            str(r["cycles"] if r["cycles"] is not None else "-"),
            f"{r['measured']:g}" if r["measured"] is not None else "-",
            Text(r["status"]),
        )
    console.print(table)
    summary = f"n={report['n']} failed={report['failed']}"
    if report["mape"] is not None:
        summary += f" scored by the {MEASURES[report['measure']]}:"
    if report["harness_fallbacks"]:
        summary += f" symbolic-address fallbacks={report['harness_fallbacks']}"
    if report["mape"] is not None:
        summary += f" MAPE={100 * report['mape']:.2f}%"
    if report["kendall_tau"] is not None:
        summary += f" Kendall tau={report['kendall_tau']:.3f}"
    console.print(summary)


def _run_and_print(mcpu, params, inputs, iterations, threads, as_json, model, harness_name, measure) -> None:
    with user_errors():
        report = run_table(mcpu, params, inputs(), iterations, threads, model, harness_name, measure)
    _print_report(report, as_json)


@app.command()
def simulate(
    mcpu: Annotated[str, typer.Option(help="LLVM CPU name (haswell, skylake, znver1, ...)")] = "haswell",
    params: Annotated[Path | None, typer.Option(help="parameter table JSON (default: LLVM's)")] = None,
    csv: Annotated[Path | None, typer.Option(help="file of hex[,measured cycles per 100 iterations]")] = None,
    hex_: Annotated[list[str] | None, typer.Option("--hex", help="a block as hex (repeatable)")] = None,
    asm: Annotated[Path | None, typer.Option(help="a block as AT&T assembly text")] = None,
    iterations: Iterations = 100,
    threads: Threads = None,
    model: Model = None,
    harness_name: Harness = None,
    measure: Measure = "steady",
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Simulate blocks with the in-process engine: per block the steady state (cycles
    per 100 iterations, as BHive measures) and llvm-mca's Total Cycles, and MAPE and
    Kendall tau of ``--measure`` when measurements are given."""
    _run_and_print(
        mcpu, params, lambda: _read_inputs(csv, hex_, asm), iterations, threads, as_json, model, harness_name, measure
    )


@app.command()
def evaluate(
    csv: Annotated[Path, typer.Option(help="file of hex,measured cycles per 100 iterations")],
    params: Annotated[Path | None, typer.Option(help="parameter table JSON (default: LLVM's)")] = None,
    mcpu: str = "haswell",
    iterations: Iterations = 100,
    threads: Threads = None,
    model: Model = None,
    harness_name: Harness = None,
    measure: Measure = "steady",
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """MAPE and Kendall tau of a parameter table against measured throughputs, scored
    by ``--measure`` (the same output as ``simulate``)."""
    _run_and_print(
        mcpu, params, lambda: _read_inputs(csv, None, None), iterations, threads, as_json, model, harness_name, measure
    )

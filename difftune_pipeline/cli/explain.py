"""Why a block costs what it costs: ``difftune explain``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from difftune_pipeline.cli.common import (
    MAX_ASM_BYTES,
    USER_ERRORS,
    WarehouseOpt,
    app,
    console,
    fail,
    path_text,
    print_json,
    printable,
    read_input,
    user_errors,
)
from difftune_pipeline.cli.params import resolve_table
from difftune_pipeline.engine import MAX_SHOWN, MAX_TRACE_ITERATIONS
from difftune_pipeline.engine.reference import llvm_mca_rounded
from difftune_pipeline.ingest.blocks import block_id, canonical_hex, hex_problem
from difftune_pipeline.warehouse import DEFAULT_PATH, ingestion


def _styles() -> tuple[dict[str, str], str]:
    """A wait's character in its cause's colour; a dispatch stall as a coloured
    background (its cells are blanks or dots). Imported late: it loads torch."""
    from difftune_pipeline.reporting.explain import STALL_COLOUR, WAIT_COLOURS

    return {cause: f"bold {colour}" for cause, colour in WAIT_COLOURS.items()}, f"on {STALL_COLOUR}"


def _measured(hex_: str | None, mcpu: str, warehouse: Path) -> tuple[float | None, str]:
    """The block's measured cycles per 100 iterations, and why there are none. The
    lookup is optional: a warehouse that is busy or unreadable leaves it out."""
    if hex_ is None:
        return None, "looked up for --hex blocks only (assembly text has no encoding)"
    if not warehouse.is_file():
        return None, f"no warehouse at {path_text(warehouse)}"
    try:
        found = ingestion.measured_throughput(warehouse, block_id(canonical_hex(hex_)), mcpu)
    except USER_ERRORS as exc:
        return None, f"unavailable ({str(exc).splitlines()[0]})"
    return found, "" if found is not None else f"not in the warehouse for -mcpu={mcpu}"


def _resolve(ref: str, base, mcpu: str, warehouse: Path):
    """(label, table) of a table reference (``params.resolve_table``), LLVM's own
    table being ``base``, already built for the block. A label never carries markup
    or control bytes, even when it is a file name."""
    if ref == "default" and not Path(ref).is_file():
        return "default", base
    label, table = resolve_table(ref, mcpu, warehouse)
    return printable(path_text(Path(label))), table


def _timeline(view: dict) -> Text:
    from difftune_pipeline.engine.trace import last_cycle
    from difftune_pipeline.reporting.explain import LABEL_WIDTH, timeline_cells, timeline_entries, timeline_header

    wait_styles, stall_style = _styles()
    entries = timeline_entries(view)
    out = Text("\n".join(timeline_header(last_cycle(entries))) + "\n")
    for (label, cells), asm in zip(timeline_cells(entries), view["row_asm"]):
        out.append(label.ljust(LABEL_WIDTH))
        for ch, cause in cells:
            style = wait_styles.get(cause, stall_style) if cause else ""
            out.append(ch, style=style)
        out.append("   " + printable(asm) + "\n")
    return out


def _pressure(view: dict, reason: str) -> str:
    """llvm-mca's rule: back-end pressure limited throughput only if dispatch ever stalled."""
    b = view["bottleneck"]
    if not b["dispatch_stalls"]:
        return "- (no dispatch stall)"
    return f"{llvm_mca_rounded(b['backend_pressure_pct'][reason]):.2f}%"


def _print(report: dict) -> None:
    from difftune_pipeline.reporting.explain import change_text

    wait_styles, stall_style = _styles()
    views = report["views"]
    console.print(f"-mcpu={report['mcpu']} (LLVM {report['llvm_version']}), {report['iterations']} iterations")
    for i, (asm, key) in enumerate(zip(report["asm"], report["row_keys"])):
        console.print(Text(f"  {i}. {printable(asm)}   [{key}]"))
    measured = report.get("measured")
    console.print(
        Text(
            f"measured: {measured:g} cycles per 100 iterations"
            if measured is not None
            else f"measured: {printable(report['measured_note'])}"
        )
    )
    summary = Table(title="cycles and bottleneck")
    summary.add_column("")
    for v in views:
        summary.add_column(Text(v["label"]), justify="right")
    rows = [
        ("total cycles", lambda v: str(v["cycles"]) if v["cycles"] is not None else Text(printable(v["status"]))),
        ("steady state / 100 iterations", lambda v: f"{v['steady_cycles_per_100']:.1f}"),
    ]
    if measured is not None:  # measurements are cycles per 100 iterations in steady state
        rows.append(
            (
                "error vs measured (steady state)",
                lambda v: f"{100 * (v['steady_cycles_per_100'] - measured) / measured:+.1f}%",
            )
        )
    ok = [v for v in views if v["cycles"] is not None]
    if ok:
        rows += [
            ("bottleneck", lambda v: v["bottleneck"]["kind"] if "bottleneck" in v else "-"),
            *[
                (f"  {k} bound / iteration", lambda v, k=k: f"{v['bottleneck']['bounds_per_iteration'][k]:.2f}")
                for k in ok[0]["bottleneck"]["bounds_per_iteration"]
            ],
            ("  simulated / iteration", lambda v: f"{v['bottleneck']['simulated_per_iteration']:.2f}"),
            (
                "busiest unit",
                lambda v: (
                    f"{v['bottleneck']['busiest_unit']} "
                    f"({v['bottleneck']['busiest_unit_cycles_per_iteration']:.2f}/iteration)"
                ),
            ),
            ("dispatch stalls", lambda v: str(v["bottleneck"]["dispatch_stalls"])),
            *[
                (f"back-end pressure: {k}", lambda v, k=k: _pressure(v, k))
                for k in ("any", "resources", "registers", "memory")
            ],
            *[
                (f"waiting: {cause}", lambda v, c=cause: str(v["wait_cycles"].get(c, 0)))
                for cause in sorted({c for v in ok for c in v["wait_cycles"]})
            ],
        ]
    for name, cell in rows:
        summary.add_row(name, *(cell(v) if v["cycles"] is not None or name == "total cycles" else "-" for v in views))
    console.print(summary)
    for v in ok:
        console.print(Text(f"\nTimeline ({v['label']}), the first iterations:", style="bold"), soft_wrap=True)
        # Rows as long as the timeline is wide: never wrapped, whatever the terminal.
        console.print(_timeline({**v, "row_asm": [report["asm"][e["index"]] for e in v["timeline"]]}), soft_wrap=True)
    console.print(
        Text("= waiting: ")
        + Text("register", wait_styles["register"])
        + Text(" · ")
        + Text("memory", wait_styles["memory"])
        + Text(" · ")
        + Text("resource busy", wait_styles["resource"])
        + Text(" · ")
        + Text("dispatch stall", stall_style)
    )
    if ok:
        pressure = Table(title="resource pressure per iteration")
        pressure.add_column("unit")
        for v in ok:
            pressure.add_column(Text(v["label"]), justify="right")
        for unit in ok[0]["units"]:
            values = [v["pressure_per_iteration"].get(unit, 0.0) for v in ok]
            if any(x >= 0.005 for x in values):
                pressure.add_row(unit, *(f"{x:.2f}" if x >= 0.005 else "-" for x in values))
        console.print(pressure)
        by_inst = Table(title=Text(f"resource pressure by instruction ({ok[0]['label']})"))
        used = [j for j, u in enumerate(ok[0]["units"]) if ok[0]["pressure_per_iteration"][u] >= 0.005]
        for j in used:
            by_inst.add_column(ok[0]["units"][j], justify="right")
        by_inst.add_column("instruction")
        for asm, row in zip(report["asm"], ok[0]["pressure_by_instruction"]):
            by_inst.add_row(*(f"{row[j]:.2f}" if row[j] >= 0.005 else "-" for j in used), Text(printable(asm)))
        console.print(by_inst)
    if "changes" in report and report["changes"] is None:
        console.print(Text(f"changes not computed: the {views[0]['label']} table's simulation failed"))
    elif "changes" in report:
        changed = Table(title=Text(f"rows of this block where {views[0]['label']} differs from {views[-1]['label']}"))
        for col in ("row", "parameters", "cycles without this change", "effect on total"):
            changed.add_column(col, justify="left" if col in ("row", "parameters") else "right")
        for c in report["changes"]:
            changed.add_row(
                Text(c["row"]),
                Text(change_text(c)),
                str(c["cycles_without"]) if c["cycles_without"] is not None else Text(printable(c["status"])),
                f"{c['effect']:+d}" if c["effect"] is not None else "-",
            )
        console.print(changed if report["changes"] else "the two tables agree on every row of this block")


@app.command()
def explain(
    mcpu: Annotated[str, typer.Option(help="LLVM CPU name (haswell, skylake, znver1, ...)")] = "haswell",
    hex_: Annotated[str | None, typer.Option("--hex", help="the block as hex")] = None,
    asm: Annotated[Path | None, typer.Option(help="the block as AT&T assembly text")] = None,
    params: Annotated[Path | None, typer.Option(help="parameter table JSON")] = None,
    table: Annotated[
        str | None,
        typer.Option(help="'default', 'learned' (the newest learned table for --mcpu) or a warehouse table id"),
    ] = None,
    against: Annotated[
        str | None, typer.Option(help="a second table to set beside it: 'default', 'learned', an id or a JSON file")
    ] = None,
    iterations: Annotated[
        int, typer.Option(min=1, max=MAX_TRACE_ITERATIONS, help="iterations to simulate (every one: no fast-forward)")
    ] = 100,
    shown: Annotated[int, typer.Option(min=1, max=MAX_SHOWN, help="iterations shown on the timeline")] = 3,
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Why a block costs what it costs: total cycles, bottleneck, llvm-mca's timeline
    and resource pressure, and with --against the table rows of the block that
    differ and how much each moves the total. The measured cycles are looked up
    for --hex blocks (assembly text has no encoding to look up)."""
    from difftune_pipeline.engine import Engine
    from difftune_pipeline.reporting.explain import explain as explain_block

    if (hex_ is None) == (asm is None):
        raise fail(ValueError("give exactly one of --hex and --asm"))
    if params is not None and table is not None:
        raise fail(ValueError("give at most one of --params and --table"))
    with user_errors():
        if hex_ is not None and (problem := hex_problem(canonical_hex(hex_))):
            raise ValueError(f"--hex: {problem}")
        engine = Engine(mcpu)
        block = (
            engine.disassemble(canonical_hex(hex_))
            if hex_ is not None
            else engine.parse_asm(read_input(asm, MAX_ASM_BYTES))
        )
        if params is not None and not params.is_file():
            raise ValueError(f"{path_text(params)} is not a file")
        base = engine.default_table([block]) if block.ok else None
        label, chosen = _resolve(
            str(params) if params else table if table is not None else "default", base, mcpu, warehouse
        )
        other = _resolve(against, base, mcpu, warehouse) if against is not None else (None, None)
        for name, t in ((label, chosen), other):
            if t is not None and t.mcpu != mcpu:
                raise ValueError(f"{name} is a table of -mcpu={t.mcpu}, not {mcpu}")
        report = explain_block(
            engine,
            block,
            chosen,
            label=label,
            against=other[1],
            against_label=other[0] or "",
            iterations=iterations,
            shown=shown,
            base=base,
        )
        report["measured"], report["measured_note"] = _measured(hex_, mcpu, warehouse)
    if as_json:
        print_json(report)
    else:
        _print(report)

"""What a run learned, from the warehouse alone: per µarch, llvm-mca as shipped,
LLVM's table under the chosen model and the learned table on the test split,
and where to go next."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from difftune_pipeline.cli.common import WarehouseOpt, app, print_json, user_errors
from difftune_pipeline.model.metrics import intervals
from difftune_pipeline.reporting.anatomy import OFF
from difftune_pipeline.warehouse import DEFAULT_PATH, evaluation

TABLES = {  # name -> column heading
    "llvm_mca": "llvm-mca",
    "default": "default",
    "learned": "learned",
}
LEGEND = (
    "llvm-mca: as shipped. default: LLVM's values under the chosen model.",
    "learned: tuned here. MAPE: error against the measured cycles (lower is better);",
    "τ: Kendall's rank correlation (higher is better). test: blocks never tuned on.",
    "steady: cycles per 100 iterations once fill and drain cancel, as BHive measures.",
    ">20pt worse: test blocks the learned table makes 20 points worse than default.",
    "Below it: test blocks more than 20% off their measurement (default → learned),",
    "and test blocks no table explains: 10x off every table, or under any table's floor.",
)


@app.command()
def results(
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """What the pipeline learned, per µarch: blocks measured, and on the test split
    the MAPE and Kendall tau of llvm-mca as shipped, of LLVM's table under the
    model the pipeline chose, and of the learned table; then where to go next.
    Reads only the warehouse."""
    with user_errors():
        if as_json:
            print_json(show(warehouse, None))
        else:
            show(warehouse, Console(highlight=False))


def show(db: Path, console: Console | None, uarchs: list[str] | None = None) -> dict[str, Any]:
    """The summary as data (``--json``'s document), printed on ``console`` when one is given."""
    rows = [r for r in evaluation.results(db).iter_rows(named=True) if not uarchs or r["uarch"] in uarchs]
    summary = [_entry(r) | _tail(db, r) for r in rows]
    steps = _next_steps(db, rows)
    if console is not None:
        console.print(_table(summary))
        for e in summary:
            if e["test_intervals"] is not None:
                console.print(_intervals_line(e["uarch"], e["test_intervals"]), markup=False)
            if e["test_off_20_share"] is not None:
                off = e["test_off_20_share"]
                console.print(
                    f"{e['uarch']}: {100 * off['default']:.1f}% → {100 * off['learned']:.1f}% of test blocks"
                    f" more than 20% off; {e['test_unexplained']} unexplained"
                )
        for line in LEGEND:
            console.print(line, style="dim", markup=False)
        console.print("Next:")
        for command, what in steps:
            console.print(f"  {what}:")
            console.print(f"    [bold]{command}[/bold]", soft_wrap=True)
    return {"uarchs": summary, "next": [{"command": c, "what": w} for c, w in steps]}


def _entry(row: dict) -> dict[str, Any]:
    return {
        "uarch": row["uarch"],
        "blocks_measured": row["blocks"],
        "test_blocks": row["test_blocks"],
        "model": row["model"],
        "measure": row["measure"],
        "test_worse_share": row["test_worse_share"],
        **{
            name: {
                "table_id": row[f"{name}_id"],
                "test_mape": row[f"{name}_mape"],
                "test_kendall_tau": row[f"{name}_tau"],
            }
            for name in TABLES
        },
    }


def _tail(db: Path, row: dict) -> dict[str, Any]:
    """The test blocks more than ``OFF`` (20%) off their measurement (share, per table),
    those in an ``unexplained:`` slice (count), and the bootstrap intervals of the default
    and learned tables' figures and of their difference; None before an evaluation."""
    if row["learned_id"] is None:
        return {"test_off_20_share": None, "test_unexplained": None, "test_intervals": None}
    from difftune_pipeline.reporting.compare import predicted_vs_measured

    ids = {name: row[f"{name}_id"] for name in TABLES}
    predicted = predicted_vs_measured(db, row["uarch"], ids, measure=row["measure"])
    share = {
        name: float(((predicted[name] - predicted["measured"]).abs() > OFF * predicted["measured"]).mean())
        for name in TABLES
    }
    unexplained = evaluation.block_slices(db, row["uarch"]).filter(pl.col("slice").str.starts_with("unexplained:"))
    spread = intervals(
        {name: predicted[name].cast(pl.Float64).fill_null(float("nan")).to_numpy() for name in ("learned", "default")},
        predicted["measured"].to_numpy(),
        pairs=(("learned", "default"),),
    )
    return {
        "test_off_20_share": share,
        "test_unexplained": predicted.join(unexplained, on="block_id").height,
        "test_intervals": {name: {k: list(v) for k, v in figures.items()} for name, figures in spread.items()},
    }


def _intervals_line(uarch: str, spread: dict) -> str:
    """One µarch's bootstrap 95% intervals in one line: the learned table's MAPE and τ,
    and its differences from the default's over the same resamples."""

    def pair(values, fmt: str) -> str:
        return "[" + ", ".join(re.sub(r"^([+-]?)0\.", r"\1.", format(v, fmt)) for v in values) + "]"

    learned, gain = spread["learned"], spread["learned - default"]
    points = [100 * v for v in gain["mape"]]
    return (
        f"{uarch} 95%: learned {pair(learned['mape'], '.2%')} τ {pair(learned['kendall_tau'], '.3f')},"
        f" vs default {'[{:+.2f}, {:+.2f}]'.format(*points)} pt τ {pair(gain['kendall_tau'], '+.4f')}"
    )


def _table(summary: list[dict]) -> Table:
    measures = sorted({e["measure"] for e in summary if e["measure"]})
    scored = f", {' and '.join(measures)}" if measures else ""
    table = Table(
        title=f"Results on the test split (MAPE / τ{scored})",
        title_justify="left",
        box=None,
        header_style="bold",
        padding=(0, 1, 0, 0),
    )
    for column in ("µarch", "blocks", "test", "model", *TABLES.values(), ">20pt worse"):
        # the model's name folds where the terminal is narrow: the figures are never cut
        folds = column == "model"
        table.add_column(
            column, justify="left" if column in ("µarch", "model") else "right", no_wrap=not folds, overflow="fold"
        )
    for e in summary:
        share = e["test_worse_share"]
        cells = [_figure(e[name]) for name in TABLES] + ["–" if share is None else f"{100 * share:.1f}%"]
        if e["learned"]["test_mape"] is None:
            cells = ["", "", "not evaluated yet: materialise evaluation", ""]
        table.add_row(e["uarch"], f"{e['blocks_measured']:,}", str(e["test_blocks"] or ""), e["model"] or "", *cells)
    if not summary:
        table.add_row("", "", "", "", "", "", "no measurements yet", "")
    return table


def _figure(entry: dict) -> str:
    if entry["test_mape"] is None:
        return "–"
    tau = entry["test_kendall_tau"]
    return f"{100 * entry['test_mape']:.1f}% / {'–' if tau is None else f'{tau:.2f}'.lstrip('0')}"


def _next_steps(db: Path, rows: list[dict]) -> list[tuple[str, str]]:
    """Commands to run next, on the first evaluated µarch (its most improved test block for ``explain``)."""
    from difftune_pipeline.reporting.compare import predicted_vs_measured
    from difftune_pipeline.reporting.explain import notable

    cli = _program()
    done = [r for r in rows if r["learned_id"] is not None]
    if not done:
        return [(f"{cli} materialize", "materialise the pipeline: the results appear here once evaluation has run")]
    uarch = done[0]["uarch"]
    steps = [(f"{cli} report", "the HTML report: every slice, the parameters that moved, the blocks explained")]
    predicted = predicted_vs_measured(
        db, uarch, {"default": done[0]["default_id"], "learned": done[0]["learned_id"]}, measure=done[0]["measure"]
    )
    cases = dict(notable(predicted))
    if "improved most" in cases:
        hex_ = predicted.filter(predicted["block_id"] == cases["improved most"])["hex"][0]
        steps.append(
            (
                f"{cli} explain --mcpu {uarch} --hex {hex_} --table learned --against {done[0]['default_id']}",
                "why the test block the learned table improved most costs what it costs",
            )
        )
    steps += [
        ("make ui", "the Dagster UI at http://127.0.0.1:3000: the graph, metadata, checks"),
        (
            f"{cli} params export --table learned --mcpu {uarch} --out {uarch}-learned.json",
            "the learned table as JSON, for simulate --params and your own work",
        ),
    ]
    return steps


def _program() -> str:
    """How this command was called, as the user can type it again here: ``.venv/bin/difftune``
    inside the checkout, ``difftune`` when that is what the PATH finds."""
    program = Path(sys.argv[0]).absolute()
    if program.name != "difftune" or not program.exists():
        return "difftune"
    try:
        return str(program.relative_to(Path.cwd().absolute()))
    except ValueError:
        on_path = shutil.which("difftune")
        return "difftune" if on_path and Path(on_path).absolute() == program else str(program)

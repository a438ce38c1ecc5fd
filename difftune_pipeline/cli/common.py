"""What every command shares: the application, its consoles, errors and progress bars."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

app = typer.Typer(
    help="DiffTune pipeline: tune llvm-mca's scheduling parameters from measured throughputs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
params_app = typer.Typer(help="Parameter tables.", no_args_is_help=True)
app.add_typer(params_app, name="params")
console = Console()
progress_console = Console(stderr=True)  # progress never mixes with --json/--csv output on stdout
CHUNK = 256


def fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(2)


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=progress_console,
        transient=True,
    )


WarehouseOpt = Annotated[Path, typer.Option("--warehouse", envvar="DIFFTUNE_WAREHOUSE", help="DuckDB file")]

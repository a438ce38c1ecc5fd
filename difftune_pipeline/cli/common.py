"""What every command shares: the application, its consoles, errors, JSON and progress bars."""

from __future__ import annotations

import json
import logging
import math
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

app = typer.Typer(
    help="DiffTune pipeline: tune llvm-mca's scheduling parameters from measured throughputs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
params_app = typer.Typer(help="Parameter tables.", no_args_is_help=True)
app.add_typer(params_app, name="params")
batches_app = typer.Typer(help="Measurement and corpus batches in the warehouse.", no_args_is_help=True)
app.add_typer(batches_app, name="batches")
console = Console()  # results: stdout
err_console = Console(
    stderr=True, soft_wrap=True
)  # errors, waits and progress never mix with --json/--csv output on stdout
CHUNK = 256


@app.callback()
def _main() -> None:
    """Waits and warnings of the library (e.g. for the warehouse lock) go to stderr."""
    logger = logging.getLogger("difftune_pipeline")
    if not logger.handlers:
        logger.addHandler(RichHandler(console=err_console, show_path=False, show_time=False))
        logger.setLevel(logging.INFO)


# What a user's input or the warehouse's state can raise: reported as one line on
# stderr (exit status 2), never a traceback. (InvalidTable is a ValueError;
# WarehouseBusy an OSError.)
USER_ERRORS = (ValueError, KeyError, OSError, duckdb.Error)


def fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(2)


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined number is null (decimals are numbers)."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def print_json(value: Any) -> None:
    """Valid JSON on stdout: undefined numbers (NaN, infinities) become null, dates strings."""
    print(json.dumps(_finite(value), indent=1, allow_nan=False, default=str))


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


WarehouseOpt = Annotated[Path, typer.Option("--warehouse", envvar="DIFFTUNE_WAREHOUSE", help="DuckDB file")]

"""What every command shares: the application, its consoles, errors, JSON and progress bars."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Iterator
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
# No highlighting: it is slow on long words, and results are data, not markup.
console = Console(highlight=False)  # results: stdout
# errors, waits and progress: stderr, never mixed with --json/--csv output
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
MAX_ERROR_CHARS = 2000
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
USER_ERRORS = (ValueError, KeyError, OSError, MemoryError, duckdb.Error)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """A user's error inside (bad input, a missing file, a busy warehouse) as ``fail``'s one line and exit 2."""
    try:
        yield
    except USER_ERRORS as exc:
        raise fail(exc) from None


def fail(exc: Exception) -> typer.Exit:
    """One line on stderr, exit status 2."""
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + f"... ({len(message) - MAX_ERROR_CHARS} more characters)"
    err_console.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def _jsonable(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined number is null. Decimals are
    numbers (integers exact), bytes hex, maps objects, dates and the rest text."""
    if isinstance(value, Decimal):
        value = int(value) if value.is_finite() and value == value.to_integral_value() else float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def print_json(value: Any) -> None:
    """Valid JSON on stdout (see ``_jsonable``)."""
    print(json.dumps(_jsonable(value), indent=1, allow_nan=False, ensure_ascii=False))


def plain(value: Any) -> str:
    """A value as one text cell (CSV, tables): nested values as JSON, null as empty."""
    if value is None:
        return ""
    if isinstance(value, dict | list | tuple | bytes | bytearray | memoryview):
        return json.dumps(_jsonable(value), allow_nan=False)
    return str(value)


MAX_ASM_BYTES = 2**20  # a block's assembly; more is not a basic block
MAX_CSV_BYTES = 2**28  # a file of blocks (BHive's largest is ~30 MB)


def path_text(path: Path) -> str:
    """A path as UTF-8 text even when its name is not (undecodable bytes escaped)."""
    return str(path).encode("utf-8", "backslashreplace").decode()


def read_input(path: Path, limit: int) -> str:
    """A user's input file as text, read up to ``limit`` bytes: a device or a pipe
    that never ends (``/dev/zero``) is refused, not read until memory runs out."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path_text(path)} is larger than {limit} bytes")
    return data.decode("utf-8-sig", errors="replace")


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text with control characters escaped (``\\x1b``): input never drives the terminal."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


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

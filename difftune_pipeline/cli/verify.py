"""Checking the simulations' files against what the warehouse recorded of them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from difftune_pipeline.cli.common import WarehouseOpt, app, console, err_console, fail, user_errors
from difftune_pipeline.warehouse import DEFAULT_PATH, simulations, writer
from difftune_pipeline.warehouse.simulation_files import resolve


@app.command()
def verify(
    warehouse: WarehouseOpt = DEFAULT_PATH,
    check_only: Annotated[bool, typer.Option("--check-only", help="name damaged chunks, forget none")] = False,
) -> None:
    """Check every recorded simulation chunk in full: its file is there, of the size
    recorded, its footer counts its rows and its bytes hash to the SHA-256 recorded.
    Each damaged or missing one is named on a line and forgotten, so the next
    `difftune materialize` simulates it again; exit status 1 when there was one."""
    if not warehouse.exists():
        raise fail(FileNotFoundError(f"no warehouse at {warehouse}"))
    with user_errors():
        checked = simulations.chunk_totals(warehouse)
        damaged = simulations.damaged_chunks(warehouse, None)
        if damaged and not check_only:
            with writer(warehouse) as con:
                simulations.forget_chunks(con, [key for key, _, _ in damaged])
    for _, file, why in damaged:
        err_console.print(f"[red]damaged:[/red] {escape(resolve(warehouse, file))}: {escape(why)}")
    n, size = checked
    console.print(f"{n} simulation chunk files ({size / 1e6:,.1f} MB) checked in full: {len(damaged)} damaged")
    if damaged:
        then = (
            "left recorded (--check-only)"
            if check_only
            else "forgotten: the next `difftune materialize` simulates the sampled tables' again "
            "(a chunk of the shard 'tuning', the tuning's record, is not)"
        )
        console.print(f"the damaged ones are {then}")
        raise typer.Exit(1)

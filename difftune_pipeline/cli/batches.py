"""Batches in the warehouse: list them, withdraw one."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from difftune_pipeline.cli.common import WarehouseOpt, batches_app, console, err_console, fail, print_json, user_errors
from difftune_pipeline.warehouse import DEFAULT_PATH, batch_state, writer


@batches_app.command("list")
def batches_list(
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Every batch with its status: ok, failed_sanity (never feeds tuning), dropped,
    replaced (its file came to hold other bytes), or changed / vanished (its file was
    rewritten or deleted before it was read: nothing of it was kept); the bytes of a
    replaced, changed or vanished batch, seen again, are ingested; ingesting while it is read."""
    with user_errors():
        frame = batch_state.batches(warehouse)
    if as_json:
        print_json(frame.to_dicts())
        return
    table = Table(title=f"{frame.height} batches in {escape(str(warehouse))}")
    for col in ("batch_id", "kind", "scope", "status", "n_read", "n_ingested", "n_quarantined", "source_file"):
        table.add_column(col, overflow="fold")
    colour = {
        "ok": "green",
        "failed_sanity": "red",
        "dropped": "dim",
        "replaced": "dim",
        "changed": "yellow",
        "vanished": "yellow",
    }
    for r in frame.iter_rows(named=True):
        plain = [escape(str(r[c])) for c in ("batch_id", "kind", "scope")]
        counts = [str(r[c]) for c in ("n_read", "n_ingested", "n_quarantined")]
        status = f"[{colour.get(r['status'], 'white')}]{escape(r['status'])}[/]"
        table.add_row(*plain, status, *counts, escape(r["source_file"]))
    console.print(table)


def _request_retune(batch_id: str) -> str:
    """Tell the Dagster instance that ``measurements`` changed, so the automation
    conditions re-tune what depends on it (with the daemon running)."""
    later = "the next `difftune materialize` re-tunes"
    if not os.environ.get("DAGSTER_HOME"):
        return f"no Dagster instance (DAGSTER_HOME is unset): {later}"
    import dagster as dg

    try:
        with dg.DagsterInstance.get() as instance:
            instance.report_runless_asset_event(
                dg.AssetMaterialization("measurements", description=f"batch {batch_id} dropped")
            )
    except Exception as exc:  # the drop is committed; only the notice failed
        return f"could not notify the Dagster instance ({exc}): {later}"
    return "what depends on it re-tunes (at once with the daemon running, else at the next `difftune materialize`)"


@batches_app.command("drop")
def batches_drop(
    batch_id: Annotated[
        str, typer.Argument(help="the batch id (see `difftune batches list`), or its inbox partition <mcpu>-<id>")
    ],
    reason: Annotated[str, typer.Option(help="why it is withdrawn (stored with the batch)")] = "dropped by a user",
    warehouse: WarehouseOpt = DEFAULT_PATH,
) -> None:
    """Withdraw a measurement batch, whatever its state: its rows leave ``measurements``,
    its record and quarantined lines stay, and its bytes are never ingested again."""
    uarch, _, batch_id = batch_id.rpartition("-")  # an inbox partition's key: <mcpu>-<batch id>
    if not warehouse.exists():
        raise fail(FileNotFoundError(f"no warehouse at {warehouse}"))
    with user_errors():
        with writer(warehouse) as con:
            result = batch_state.drop_batch(con, batch_id, reason, uarch or None)
    if result["already_dropped"]:
        console.print(f"batch {escape(batch_id)} was already dropped: nothing changed")
        return
    console.print(f"dropped batch {escape(batch_id)}: {result['rows_removed']} measurements withdrawn")
    err_console.print(escape(_request_retune(batch_id)))

"""Parameter tables: export, import, diff."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from difftune_pipeline.cli.common import WarehouseOpt, console, params_app, path_text, user_errors
from difftune_pipeline.warehouse import DEFAULT_PATH, tables, writer


def resolve_table(ref: str, mcpu: str, warehouse: Path):
    """A table by reference: a JSON file, 'default' (LLVM's), 'learned' (the newest
    learned table of ``mcpu`` in the warehouse) or a warehouse table id."""
    from difftune_pipeline.engine import Engine, ParamTable

    if Path(ref).is_file():
        return ref, ParamTable.from_json(Path(ref))
    if ref == "default":
        return ref, Engine(mcpu).default_table()
    if ref == "learned":
        latest = tables.latest_learned(warehouse, mcpu)
        if latest is None:
            raise KeyError(f"no learned table for -mcpu={mcpu} in {warehouse}")
        ref = latest
    return ref, tables.load_table(warehouse, ref)


TableRef = Annotated[
    str,
    typer.Argument(
        help="a JSON file, 'default' (LLVM's), 'learned' (the newest learned table for --mcpu) or a warehouse table id"
    ),
]


@params_app.command("export")
def params_export(
    out: Annotated[Path, typer.Option(help="JSON file to write")],
    mcpu: Annotated[
        str | None, typer.Option(help="LLVM CPU name (default haswell); a stored table must be of it")
    ] = None,
    table: Annotated[
        str,
        typer.Option(
            help="'default' (LLVM's), 'learned' (the newest learned table for --mcpu in the warehouse) or a table id"
        ),
    ] = "default",
    warehouse: WarehouseOpt = DEFAULT_PATH,
) -> None:
    """Write a parameter table as JSON that the engine imports."""
    with user_errors():
        name, t = resolve_table(table, mcpu or "haswell", warehouse)
        if mcpu is not None and t.mcpu != mcpu:
            raise ValueError(f"{name} is a table of -mcpu={t.mcpu}, not {mcpu}")
        out.parent.mkdir(parents=True, exist_ok=True)
        t.to_json(out)
    console.print(
        f"wrote {escape(name)}: {len(t.rows)} opcodes of -mcpu={t.mcpu} (LLVM {t.llvm_version}) to {escape(str(out))}"
    )


def _pipeline_id(table_id: str) -> bool:
    """Whether an id is of a form the pipeline gives its own tables (default-, llvm-mca-,
    learned- and visited-<mcpu>-<hash>, <preset>-<seed>-<mcpu>-<hash> for sampled ones),
    or 'default' or 'learned', which the commands read as LLVM's table and the newest
    learned one: an import may not take one."""
    from difftune_pipeline.model.params import PRESETS

    own = rf"^(default|llvm-mca|learned|visited|(?:{'|'.join(PRESETS)})-[0-9]+)-"
    return table_id in ("default", "learned") or re.match(own, table_id) is not None


@params_app.command("import")
def params_import(
    file: Annotated[Path, typer.Argument(help="parameter table JSON (the format `params export` writes)")],
    table_id: Annotated[str | None, typer.Option("--id", help="table id (default: imported-<mcpu>-<hash>)")] = None,
    note: Annotated[str, typer.Option(help="a note stored with the table")] = "",
    warehouse: WarehouseOpt = DEFAULT_PATH,
) -> None:
    """Store a table in the warehouse (kind 'imported') after the engine has
    validated every parameter, so it can be diffed, exported and evaluated by id."""
    from difftune_pipeline.engine import Engine, ParamTable

    with user_errors():
        table = ParamTable.from_json(file)
        Engine(table.mcpu).compile(table)
        table_id = table_id or f"imported-{table.mcpu}-{table.fingerprint()}"
        if _pipeline_id(table_id):
            raise ValueError(f"table id {table_id!r} is of the form of the pipeline's own tables: choose another --id")
        with writer(warehouse) as con:  # compared and stored in one transaction
            stored = tables.stored_table(con, table_id)
            mine = (table.mcpu, table.llvm_version, table.to_frame().sort(["opcode", "param", "idx"]))
            if stored is not None and (stored[:2] != mine[:2] or not stored[3].equals(mine[2])):
                raise ValueError(f"table id {table_id!r} already holds a different table: choose another --id")
            new = tables.save_table(
                con, table_id, table, kind="imported", note=note or f"imported from {path_text(file)}"
            )
    console.print(
        f"{'stored' if new else 'already stored'}: {escape(table_id)} ({len(table.rows)} opcodes, -mcpu={table.mcpu})"
    )


@params_app.command("diff")
def params_diff(
    table: TableRef,
    against: Annotated[str, typer.Option(help="the table to compare with (same forms as TABLE)")] = "default",
    mcpu: str = "haswell",
    warehouse: WarehouseOpt = DEFAULT_PATH,
    as_csv: Annotated[bool, typer.Option("--csv")] = False,
) -> None:
    """The parameters where TABLE differs from the defaults (or --against), one row
    each. Both tables must be valid tables of the same CPU."""
    from difftune_pipeline.engine import Engine, InvalidTable
    from difftune_pipeline.engine.table import diff

    with user_errors():
        name, t = resolve_table(table, mcpu, warehouse)
        base_name, base = resolve_table(against, t.mcpu, warehouse)
        if base.mcpu != t.mcpu:
            raise ValueError(f"{name} is a table of -mcpu={t.mcpu}, {base_name} of -mcpu={base.mcpu}: not comparable")
        engine = Engine(t.mcpu)
        for ref, checked in ((name, t), (base_name, base)):
            try:
                engine.compile(checked)
            except InvalidTable as exc:
                raise ValueError(f"{ref}: {exc}") from None
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

"""A user's SQL on the warehouse, bounded: one read-only statement, stopped with one
line when it runs past its time, memory or temporary disk."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from difftune_pipeline.warehouse.connection import DEFAULT_PATH, connect, parse_size, with_simulations

# A user's query may hold this much memory and spill this much to disk: enough for any
# query of the pipeline's tables, little enough to leave a 2-core, 24 GiB machine usable.
DEFAULT_QUERY_MEMORY = "2GB"


DEFAULT_QUERY_TEMP = "8GB"


EXPLAIN = re.compile(r"^\s*explain\s+(analy[sz]e\s+)?", re.IGNORECASE)


# DuckDB's names of the kinds of statement that read as something else to a user.
STATEMENTS = {
    "MULTI": "a PIVOT whose values DuckDB finds first (list them, PIVOT t ON c IN (...), and it is a query)",
    "LOAD": "INSTALL or LOAD",
    "CALL": "CALL or CHECKPOINT",
}


def _one_statement(sql: str) -> duckdb.StatementType:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ValueError(str(exc)) from None
    if len(statements) != 1:
        raise ValueError(f"give exactly one SQL statement, got {len(statements)}")
    return statements[0].type


@dataclass(frozen=True)
class QueryLimits:
    """What a user's query may take: seconds (a reader holds the file, so writers wait
    while it runs), memory, and temporary disk for what it spills (DuckDB sizes: '2GB')."""

    seconds: float | None = None
    memory: str = DEFAULT_QUERY_MEMORY
    temp: str = DEFAULT_QUERY_TEMP


def user_query(
    sql: str, path: str | Path = DEFAULT_PATH, limits: QueryLimits = QueryLimits()
) -> tuple[list[str], list[tuple]]:
    """A user's query: exactly one SELECT (DESCRIBE, SHOW and SUMMARIZE are
    SELECTs to DuckDB), or EXPLAIN of one, on the read-only connection; anything
    else is refused before it runs (EXPLAIN ANALYZE runs its statement: refused).
    Returns the column names and the rows as Python values (any DuckDB type). The
    query is stopped, with one line saying which limit it reached, after
    ``limits.seconds``, or when it needs more memory than ``limits.memory`` or more
    temporary disk than ``limits.temp`` (its spill goes to a folder of its own,
    removed after it)."""
    kind = _one_statement(sql)
    if kind == duckdb.StatementType.EXPLAIN:
        found = EXPLAIN.match(sql)
        if found is None:
            raise ValueError("start the statement with EXPLAIN (no comment before it)")
        if found.group(1):
            raise PermissionError("only a plain EXPLAIN of a query runs here, not EXPLAIN ANALYZE (it runs the query)")
        kind = _one_statement(sql[found.end() :])
    if kind != duckdb.StatementType.SELECT:
        raise PermissionError(
            f"the warehouse is read-only here: only queries (SELECT, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN) "
            f"run, not {STATEMENTS.get(kind.name, kind.name)}"
        )
    with _spill_folder(Path(path)) as spill:
        settings = {"memory_limit": limits.memory, "max_temp_directory_size": limits.temp, "temp_directory": spill}
        con = connect(path, read_only=True, limits=settings)
        guard = _Guard(con, limits, Path(spill))
        try:
            with with_simulations(con, path, sql):
                guard.start()
                result = con.sql(sql)
                if result is None:
                    return [], []
                return list(result.columns), result.fetchall()
        except duckdb.InterruptException:
            raise guard.reason() from None
        except duckdb.OutOfMemoryException as exc:
            raise (_over_temp(limits) if "max_temp_directory_size" in str(exc) else _over_memory(limits)) from None
        finally:
            guard.stop()
            con.close()


@contextlib.contextmanager
def _spill_folder(db: Path) -> Iterator[str]:
    """A folder of its own for one query's spill, removed after it: beside the warehouse
    (DuckDB's own choice: /tmp is often memory), else the system's temporary folder."""
    try:
        folder = tempfile.mkdtemp(prefix=f".{db.name}.query-", dir=db.resolve().parent)
    except OSError:  # a warehouse on a read-only mount
        folder = tempfile.mkdtemp(prefix="difftune-query-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _over_memory(limits: QueryLimits) -> MemoryError:
    what = f"more memory than its limit, {limits.memory} (--memory-limit, DIFFTUNE_QUERY_MEMORY)"
    return MemoryError(f"the query needed {what} and was stopped")


def _over_temp(limits: QueryLimits) -> MemoryError:
    what = f"more temporary disk than its limit, {limits.temp} (--temp-limit, DIFFTUNE_QUERY_TEMP)"
    return MemoryError(f"the query needed {what} and was stopped")


class _Guard(threading.Thread):
    """Interrupts a user's query past its time, or once its spill folder holds more than
    its temporary-disk limit (DuckDB's own max_temp_directory_size does not bound every
    operator's spill: a sort's went past it)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, limits: QueryLimits, spill: Path):
        super().__init__(daemon=True)
        self.con, self.limits, self.spill = con, limits, spill
        self.temp = parse_size(limits.temp)
        self.over: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.limits.seconds if self.limits.seconds else float("inf")
        while not self.done.wait(0.05):
            if time.monotonic() >= deadline:
                self.over = "time"
            elif _size(self.spill) > self.temp:
                self.over = "temp"
            if self.over:
                self.con.interrupt()
                return

    def stop(self) -> None:
        self.done.set()

    def reason(self) -> Exception:
        if self.over == "temp":
            return _over_temp(self.limits)
        if self.over == "time":
            seconds = self.limits.seconds
            return TimeoutError(f"the query ran longer than {seconds:g} s (--timeout) and was stopped")
        return InterruptedError("the query was interrupted")


def _size(folder: Path) -> int:
    """Bytes of the files under ``folder`` now (a file DuckDB deletes meanwhile counts nothing)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total

"""Connections to the DuckDB warehouse file.

DuckDB lets one process write a file, or any number read it, at a time. So no
one holds the file longer than one transaction: writers open it inside
``writer()`` and commit as one transaction, readers open it for one query. A
connection that finds the file locked by another process waits for it,
saying which process holds it, up to ``DIFFTUNE_LOCK_TIMEOUT`` seconds.

Read connections cannot reach anything but the warehouse: no files, no other
databases, no extensions, no settings changes, so a query can never write.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

from difftune_pipeline.warehouse.schema import MIGRATIONS, migrate

DEFAULT_PATH = Path("warehouse") / "difftune.duckdb"
Db = str | Path  # a warehouse file
DEFAULT_LOCK_TIMEOUT = 300.0
# A user's query may hold this much memory and spill this much to disk: enough for any
# query of the pipeline's tables, little enough to leave a 2-core, 24 GiB machine usable.
DEFAULT_QUERY_MEMORY = "2GB"
DEFAULT_QUERY_TEMP = "8GB"
READ_ONLY_CONFIG = {
    "enable_external_access": False,  # no read_csv/COPY TO/ATTACH of other files, no INSTALL
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,  # no SET/PRAGMA that changes the settings above
}
log = logging.getLogger(__name__)


class WarehouseBusy(TimeoutError):
    """Another process held the warehouse file for longer than the lock timeout."""


def lock_timeout(value: str | None = None) -> float:
    """Seconds to wait for the file: ``value``, else ``DIFFTUNE_LOCK_TIMEOUT``, else 300."""
    value = os.environ.get("DIFFTUNE_LOCK_TIMEOUT", "") if value is None else value
    try:
        seconds = float(value) if value else DEFAULT_LOCK_TIMEOUT
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:
        raise ValueError(
            f"DIFFTUNE_LOCK_TIMEOUT={value!r}: seconds to wait for the warehouse, a number ≥ 0 "
            f"(default {DEFAULT_LOCK_TIMEOUT:g})"
        )
    return seconds


def _holder(message: str) -> str:
    found = re.search(r"held in (.*?) \(PID (\d+)\)", message)
    return f"process {found.group(2)} ({found.group(1)})" if found else "another process"


def _open(path: Path, read_only: bool, limits: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open the file, waiting (with jittered back-off) while another process holds its lock."""
    timeout = lock_timeout()
    deadline = time.monotonic() + timeout
    delay, waited = 0.01, False
    config = {**READ_ONLY_CONFIG, **(limits or {})} if read_only else {}
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config=config)
            if waited:
                log.info("the warehouse %s is free again", path)
            return con
        except duckdb.IOException as exc:
            if "Could not set lock" not in str(exc):
                raise
            holder = _holder(str(exc))
            if time.monotonic() >= deadline:
                raise WarehouseBusy(
                    f"the warehouse {path} is held by {holder}, which did not release it within "
                    f"{timeout:g} s (DIFFTUNE_LOCK_TIMEOUT); a reader that keeps a connection open "
                    "(a notebook, a DuckDB shell) blocks every writer: close it"
                ) from None
            if not waited:
                log.warning(
                    "waiting for the warehouse %s to be %s: %s holds it (up to %g s)",
                    path,
                    "readable" if read_only else "writable",
                    holder,
                    timeout,
                )
                waited = True
            time.sleep(min(delay * random.uniform(0.5, 1.5), max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.25)


def connect(
    path: str | Path = DEFAULT_PATH, *, read_only: bool = False, limits: dict | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to the warehouse, its schema brought up to date first (a read
    of a file written by an older version migrates it once). ``limits``: DuckDB
    settings a read-only connection is opened with (and cannot change)."""
    path = Path(path)
    if read_only:
        if not path.exists():
            raise FileNotFoundError(f"no warehouse at {path}: materialise the pipeline first (make run)")
        con = _open(path, read_only=True, limits=limits)
        if _identity(path) in _CURRENT:
            return con
        version = _version(con)
        if version == 0:
            con.close()
            raise ValueError(f"{path} is not a warehouse of this pipeline (it has no schema_version)")
        if version < len(MIGRATIONS):  # written by an older version: migrate it once
            con.close()
            connect(path).close()
            con = _open(path, read_only=True, limits=limits)
        _CURRENT.add(_identity(path))
        return con
    path.parent.mkdir(parents=True, exist_ok=True)
    con = _open(path, read_only=False)
    try:
        version = _version(con)
        if version == 0 and scalar(con, "SELECT count(*) FROM duckdb_tables()"):
            raise ValueError(f"{path} is a DuckDB file of something else (it has no schema_version): not touched")
        if version < len(MIGRATIONS):
            migrate(con, path)
    except BaseException:
        con.close()
        raise
    return con


# Files this process has seen at the newest schema, by (device, inode, mtime): a
# read need not ask again until the file changes (a schema never goes back).
_CURRENT: set[tuple[int, int, int]] = set()


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _version(con: duckdb.DuckDBPyConnection) -> int:
    try:
        return scalar(con, "SELECT max(version) FROM schema_version") or 0
    except duckdb.CatalogException:
        return 0


@contextlib.contextmanager
def writer(path: str | Path = DEFAULT_PATH, memory_limit: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived connection whose work commits as one transaction, or not at all;
    with ``memory_limit``, DuckDB holds no more than that (beyond it, it spills or fails)."""
    con = connect(path)
    try:
        if memory_limit is not None:
            con.execute(f"SET memory_limit = '{parse_size(memory_limit)}B'")
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
            con.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(duckdb.Error):  # a COMMIT that failed (a full disk) has ended it already
                con.execute("ROLLBACK")
            if isinstance(exc, duckdb.Error) and os.strerror(errno.ENOSPC) in str(exc):
                # DuckDB reports a full disk inside whichever of its errors hit it: say it as the OSError it is
                raise OSError(errno.ENOSPC, f"the disk holding the warehouse {path} is full: {exc}") from None
            raise
    finally:
        con.close()


def query(sql: str, path: str | Path = DEFAULT_PATH, params: list | None = None) -> pl.DataFrame:
    """Run one statement on a read-only connection: a query can never write."""
    con = connect(path, read_only=True)
    try:
        with _with_simulations(con, path, sql):
            return con.sql(sql, params=params or None).pl()
    finally:
        con.close()


@contextlib.contextmanager
def _with_simulations(con: duckdb.DuckDBPyConnection, path: str | Path, sql: str) -> Iterator[None]:
    """A statement that reads ``simulations`` reads the recorded chunks' Parquet files
    (``simulation_files``): the view is given to its connection, over the files recorded
    now, each checked cheaply first. A scan that fails on a file's bytes (a page's
    checksum) is said as the damaged chunk files it found, checked in full."""
    try:
        reads = "simulations" in {name.lower() for name in duckdb.get_table_names(sql)}
    except duckdb.Error:  # a statement with parameters is not bound here: its text says
        reads = re.search(r"\bsimulations\b", sql, re.IGNORECASE) is not None
    if not reads:
        yield
        return
    from difftune_pipeline.warehouse import simulation_files

    records = con.execute("SELECT file, bytes, rows, sha256 FROM simulation_chunks").fetchall()
    simulation_files.check(path, records)
    simulation_files.register(con, path, [file for file, *_ in records])
    try:
        yield
    except (duckdb.InvalidInputException, duckdb.IOException) as exc:
        damaged = simulation_files.damage(path, records, full=True)
        if damaged:
            raise simulation_files.DamagedChunks(path, damaged) from exc
        raise


EXPLAIN = re.compile(r"^\s*explain\s+(analy[sz]e\s+)?", re.IGNORECASE)


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
            f"run, not {kind.name}"
        )
    with _spill_folder(Path(path)) as spill:
        settings = {"memory_limit": limits.memory, "max_temp_directory_size": limits.temp, "temp_directory": spill}
        con = connect(path, read_only=True, limits=settings)
        guard = _Guard(con, limits, Path(spill))
        try:
            with _with_simulations(con, path, sql):
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


SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*((?:[KMGT]i?)?B)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size as DuckDB's settings take it (2GB, 512MiB, 100 kB); ``ValueError`` if it is not one."""
    found = SIZE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a size such as 2GB or 512MiB")
    number, unit = float(found.group(1)), found.group(2).upper()
    power = "BKMGT".index(unit[0]) if unit != "B" else 0
    return int(number * (1024 if "I" in unit else 1000) ** power)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """The single value of a one-row statement (the result is fully consumed:
    DuckDB 2.0 fails the next statement while a result is open)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


def insert_new(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame, key: list[str]) -> int:
    """Insert the rows of ``frame`` whose key is not in ``table`` yet; returns how many."""
    if frame.is_empty():
        return 0
    con.register("_incoming", frame.to_arrow())
    try:
        on = " AND ".join(f"t.{k} = i.{k}" for k in key)
        cols = ", ".join(frame.columns)
        return scalar(
            con,
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _incoming i "
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {on})",
        )
    finally:
        con.unregister("_incoming")


def now() -> datetime:
    """Timestamps are stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def row_count(db: Db, table: str) -> int:
    if not table.isidentifier():
        raise ValueError(f"not a table name: {table!r}")
    return int(query(f'SELECT count(*) AS n FROM "{table}"', db)["n"][0])

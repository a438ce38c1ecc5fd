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
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

from difftune_pipeline.warehouse.schema import MIGRATIONS, migrate

DEFAULT_PATH = Path("warehouse") / "difftune.duckdb"
Db = str | Path  # a warehouse file
DEFAULT_LOCK_TIMEOUT = 300.0
# A file this young that DuckDB reads as no database is one another process is
# still creating; an older one is damaged, and said so at once.
CREATION_SECONDS = 5.0
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


def _being_created(path: Path, exc: duckdb.IOException) -> bool:
    """Whether ``exc`` is DuckDB finding the file another process is creating: it
    exists before its header is written, and reads as no database for that moment."""
    if "not a valid DuckDB database file" not in str(exc):
        return False
    try:
        return time.time() - path.stat().st_mtime < CREATION_SECONDS
    except FileNotFoundError:
        return True


def _open(path: Path, read_only: bool, limits: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open the file, waiting (with jittered back-off) while another process holds
    its lock or is creating it."""
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
            if _being_created(path, exc) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
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
        with with_simulations(con, path, sql):
            return con.sql(sql, params=params or None).pl()
    finally:
        con.close()


@contextlib.contextmanager
def with_simulations(con: duckdb.DuckDBPyConnection, path: str | Path, sql: str) -> Iterator[None]:
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


SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*((?:[KMGT]i?)?B)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size as DuckDB's settings take it (2GB, 512MiB, 100 kB); ``ValueError`` if it is not one."""
    found = SIZE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a size such as 2GB or 512MiB")
    number, unit = float(found.group(1)), found.group(2).upper()
    power = "BKMGT".index(unit[0]) if unit != "B" else 0
    return int(number * (1024 if "I" in unit else 1000) ** power)

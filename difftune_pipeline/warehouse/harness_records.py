"""Where each block's loads and stores land under a harness model, as the
warehouse records them (tables block_harness, block_accesses)."""

from __future__ import annotations

import duckdb
import polars as pl

from difftune_pipeline.warehouse.connection import Db, insert_new, query


def harness_recorded(db: Db, harness: str) -> set[str]:
    """Blocks whose accesses are recorded under harness model ``harness``."""
    return set(query("SELECT block_id FROM block_harness WHERE harness = ?", db, [harness])["block_id"].to_list())


def save_accesses(con: duckdb.DuckDBPyConnection, status: pl.DataFrame, accesses: pl.DataFrame) -> None:
    """Blocks' accesses and how their harness model fared (rows already there are kept)."""
    insert_new(con, "block_accesses", accesses, ["block_id", "harness", "seq"])
    insert_new(con, "block_harness", status, ["block_id", "harness"])


def harness_status(db: Db, harness: str, block_ids: list[str]) -> pl.DataFrame:
    return query(
        "SELECT block_id, addresses, status FROM block_harness WHERE harness = ? AND block_id IN (SELECT unnest(?))",
        db,
        [harness, block_ids],
    )


def harness_accesses(db: Db, harness: str, block_ids: list[str]) -> pl.DataFrame:
    return query(
        """
        SELECT block_id, iteration, instr, address, bytes, is_store FROM block_accesses
        WHERE harness = ? AND block_id IN (SELECT unnest(?)) ORDER BY block_id, seq
        """,
        db,
        [harness, block_ids],
    )


def harness_summary(db: Db, harness: str, block_ids: list[str]) -> dict:
    """Of ``block_ids``: how many ran under the harness model, how many fell back
    (the commonest reasons) and the emulation's mean cost."""
    frame = query(
        """
        SELECT addresses, regexp_replace(status, ' at instruction.*| \\(.*', '') AS reason, count(*) AS n,
               sum(seconds) AS seconds
        FROM block_harness WHERE harness = ? AND block_id IN (SELECT unnest(?)) GROUP BY ALL ORDER BY n DESC
        """,
        db,
        [harness, block_ids],
    )
    n = int(frame["n"].sum()) if frame.height else 0
    emulated = int(frame.filter(pl.col("addresses") == harness)["n"].sum()) if frame.height else 0
    return {
        "recorded": n,
        "emulated": emulated,
        "fallbacks": {r: int(c) for r, c in frame.filter(pl.col("reason") != "ok").select("reason", "n").iter_rows()},
        "ms_per_block": 1e3 * float(frame["seconds"].sum()) / n if n else 0.0,
    }


def aliasing_blocks(db: Db, harness: str) -> pl.DataFrame:
    """Blocks in which a load reads bytes a store of the block wrote (any
    iteration), under harness model ``harness``: (block_id, loads, stores) counts
    of the overlapping accesses."""
    return query(
        """
        SELECT l.block_id, count(DISTINCT l.seq) AS loads, count(DISTINCT s.seq) AS stores
        FROM block_accesses l JOIN block_accesses s
          ON l.block_id = s.block_id AND l.harness = s.harness AND s.is_store AND NOT l.is_store
         AND l.address < s.address + s.bytes AND s.address < l.address + l.bytes
        WHERE l.harness = ? GROUP BY l.block_id ORDER BY l.block_id
        """,
        db,
        [harness],
    )

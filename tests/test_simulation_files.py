"""Simulated chunks as Parquet files: written under a temporary name and renamed,
named by what they hold (written again, replaced), on a local folder or a URI."""

import os
import time

import duckdb
import numpy as np
import pytest

from difftune_pipeline import environment
from difftune_pipeline.engine import SimResult
from difftune_pipeline.warehouse import simulation_files as sf


def _writer(root, db, shard="shard-0"):
    return sf.ChunkWriter(str(root), str(db), "haswell", "19", 100, shard)


def _result(cycles, status):
    """What the engine gives for ``cycles`` (steady state: a tenth of them, to tell the two apart)."""
    ok = np.array([st == "ok" for st in status])
    return SimResult(np.array(cycles), status, np.where(ok, np.array(cycles) / 10, np.nan))


def _chunk(ids, table="t1"):
    return sf.Chunk(sf.chunk_key("haswell", "19", 100, table, ids), table, ids)


def _read(db, files):
    con = duckdb.connect()
    sf.register(con, db, files)
    return con.sql(
        "SELECT block_id, table_id, cycles, steady_cycles_per_100, status FROM simulations ORDER BY ALL"
    ).fetchall()


def test_a_chunk_written_again_replaces_its_file(tmp_path):
    db, ids = tmp_path / "w.duckdb", ["b1", "b2", "b3"]
    files = _writer(tmp_path / "simulations", db)
    first = files(_chunk(ids), _result([100, -1, 300], ["ok", "cycle cap", "ok"]))
    again = files(_chunk(ids), _result([100, -1, 300], ["ok", "cycle cap", "ok"]))
    assert first == again and (first["rows"], first["failed"]) == (3, 1)
    assert first["file"] == f"simulations/haswell/shard-0/{_chunk(ids).key}.parquet"  # relative to the warehouse
    on_disk = list((tmp_path / "simulations").rglob("*"))
    assert [p.name for p in on_disk if p.is_file()] == [f"{_chunk(ids).key}.parquet"]  # no temporary file left
    assert _read(db, [first["file"]]) == [
        ("b1", "t1", 100, 10.0, "ok"),
        ("b2", "t1", None, None, "cycle cap"),
        ("b3", "t1", 300, 30.0, "ok"),
    ]
    assert sf.sizes(db, [first["file"], "simulations/gone.parquet"]) == [first["bytes"], None]


def test_only_stale_temporary_files_are_removed(tmp_path):
    files = _writer(tmp_path / "simulations", tmp_path / "w.duckdb")
    files(_chunk(["b1"]), _result([5], ["ok"]))
    folder = tmp_path / "simulations" / "haswell" / "shard-0"
    old, young = folder / ".dead.1.tmp", folder / ".alive.2.tmp"
    old.write_bytes(b"PAR1 half")
    young.write_bytes(b"PAR1 half")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert files.remove_stale(time.time() - 60) == 1
    assert not old.exists() and young.exists() and len(list(folder.glob("*.parquet"))) == 1


def test_chunks_on_a_uri_are_written_and_read_through_pyarrow(tmp_path):
    db = tmp_path / "w.duckdb"
    files = _writer("mock:///bucket/sims", db)  # pyarrow's in-memory filesystem, as an object store would be
    a = files(_chunk(["b1", "b2"]), _result([10, 20], ["ok", "ok"]))
    b = files(_chunk(["b3"], "t2"), _result([30], ["ok"]))
    assert a["file"].startswith("mock:///bucket/sims/haswell/shard-0/")  # recorded as the full URI
    assert _read(db, [a["file"], b["file"]]) == [
        ("b1", "t1", 10, 1.0, "ok"),
        ("b2", "t1", 20, 2.0, "ok"),
        ("b3", "t2", 30, 3.0, "ok"),
    ]
    assert not (tmp_path / "simulations").exists()


@pytest.mark.parametrize("root", ["nosuch://bucket/x", "hdfs://nowhere:1/x"])
def test_a_dataset_location_pyarrow_cannot_open_is_refused_in_one_line(root):
    with pytest.raises(environment.SettingError) as refused:
        environment.read({"DIFFTUNE_SIMULATIONS": root})
    message = str(refused.value)
    assert message.startswith(f"DIFFTUNE_SIMULATIONS={root!r}") and "\n" not in message

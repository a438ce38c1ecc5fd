"""Ingestion: every row accounted for, bad rows quarantined with reasons, idempotent."""

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from conftest import SAMPLE
from difftune_pipeline.engine import InvalidTable, ParamTable
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.ingest import owner, rows
from difftune_pipeline.ingest.blocks import block_id, split_of
from difftune_pipeline.warehouse import batch_state, data_migrations, ingestion, schema, tables
from difftune_pipeline.warehouse import connection as store

GOOD = "4801d8,100.0\n4883c0014839d875f7,250\n"
BAD_LINES = {
    "zz12,100": "non-hex character",
    "abc,100": "odd number of hex digits",
    ",100": "empty hex string",
    "4801d8": "expected 2 comma-separated fields",
    "4801d8,1,2": "expected 2 comma-separated fields",
    "4801c8,abc": "is not a number",
    "4801c8,-5": "must be positive",
    "4801c8,0": "must be positive",
    "4801c8,nan": "is not finite",
    "4801c0,1e300": "not a basic block's throughput",
    "4801c9,1e9": "not a basic block's throughput",
    "4801c1,1e-300": "not a basic block's throughput",
    "4801c2,1_000": "is not a number",
    "4801c3,\u0661\u0660\u0660": "is not a number",
    "0fff,100": "undecodable",
}


def _count(db, sql):
    return store.query(sql, db).item()


def test_good_and_bad_rows_are_all_accounted_for(haswell, warehouse, tmp_path):
    path = tmp_path / "batch.csv"
    path.write_text(GOOD + "\n".join(BAD_LINES) + "\n")
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.n_read, summary.n_ingested, summary.n_quarantined) == (2 + len(BAD_LINES), 2, len(BAD_LINES))
    reasons = dict(store.query("SELECT raw, reason FROM quarantine", warehouse).iter_rows())
    for raw, reason in BAD_LINES.items():
        matching = [r for k, r in reasons.items() if k.split(",")[0] == raw.split(",")[0] and reason in r]
        assert matching, (raw, reasons)
    assert _count(warehouse, "SELECT count(*) FROM measurements") == 2
    assert (
        _count(
            warehouse,
            "SELECT cycles_per_100 FROM measurements WHERE block_id = ?".replace("?", f"'{block_id('4801d8')}'"),
        )
        == 100.0
    )
    # An undecodable block is kept, quarantined, in blocks too.
    assert _count(warehouse, "SELECT reason FROM blocks WHERE hex = '0fff'").startswith("undecodable")


def test_repeated_measurements_are_kept_and_corpus_duplicates_quarantined(haswell, warehouse, tmp_path):

    path = tmp_path / "repeats.csv"
    path.write_text("4801d8,100\n4801D8,100\n4801d8,130\n")
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.n_ingested, summary.n_quarantined) == (3, 0)
    ingest.assign_splits(warehouse)
    split = store.query("SELECT split FROM splits", warehouse).item()
    assert ingestion.measured_blocks(warehouse, "haswell", [split])["cycles_per_100"].to_list() == [110.0]
    corpus = tmp_path / "app.csv"
    corpus.write_text("4801d8,1\n4801D8,1\n4801d8,2\n")
    ingest.ingest_corpus(corpus, warehouse, haswell)
    reasons = store.query("SELECT reason FROM quarantine ORDER BY line_no", warehouse)["reason"].to_list()
    assert reasons == ["duplicate of line 1", "conflicts with line 1 (frequency 1 vs 2)"]


def test_reingesting_adds_nothing_and_new_files_add_only_what_is_new(haswell, warehouse, tmp_path):
    first = tmp_path / "a.csv"
    first.write_text(GOOD)
    ingest.ingest_measurements(first, "haswell", warehouse, haswell)
    names = ["blocks", "measurements", "quarantine", "batches"]
    before = {t: _count(warehouse, f"SELECT count(*) FROM {t}") for t in names}
    again = ingest.ingest_measurements(first, "haswell", warehouse, haswell)
    assert again.already_ingested
    assert {t: _count(warehouse, f"SELECT count(*) FROM {t}") for t in names} == before
    second = tmp_path / "b.csv"
    second.write_text("4801d8,101\n4829d8,90\n")  # one known block, one new
    ingest.ingest_measurements(second, "haswell", warehouse, haswell)
    assert _count(warehouse, "SELECT count(*) FROM blocks") == before["blocks"] + 1
    assert _count(warehouse, "SELECT count(*) FROM measurements") == before["measurements"] + 2
    # The same bytes measured on another µarch are another batch.
    assert not ingest.ingest_measurements(first, "skylake", warehouse, haswell).already_ingested


def test_units_convert_per_iteration_measurements(haswell, warehouse, tmp_path):
    path = tmp_path / "zen.csv"
    path.write_text("4801d8,1.25\n")
    ingest.ingest_measurements(path, "znver1", warehouse, haswell, unit="cycles_per_iteration")
    assert _count(warehouse, "SELECT cycles_per_100 FROM measurements") == 125.0
    with pytest.raises(ValueError, match="unknown unit"):
        ingest.ingest_measurements(path, "znver1", warehouse, haswell, unit="seconds")


def test_corpus_ingestion_and_identical_files_of_two_apps(haswell, warehouse, tmp_path):
    for app in ("appa", "appb"):
        (tmp_path / f"{app}.csv").write_text("4801d8,0.5\n4829d8,0\nzz,1\n4801c8,-1\n")
        s = ingest.ingest_corpus(tmp_path / f"{app}.csv", warehouse, haswell)
        assert (s.n_read, s.n_ingested, s.n_quarantined) == (4, 2, 2)
    assert _count(warehouse, "SELECT count(DISTINCT app) FROM block_sources") == 2
    assert _count(warehouse, "SELECT count(*) FROM block_sources") == 4


def test_splits_are_deterministic_and_stable(haswell, warehouse, sample_rows):
    ids = [block_id(h) for h, _ in sample_rows]
    splits = [split_of(b) for b in ids]
    assert splits == [split_of(b) for b in ids]
    counts = {s: splits.count(s) / len(splits) for s in ("train", "val", "test")}
    assert counts["train"] == pytest.approx(0.8, abs=0.03) and counts["test"] == pytest.approx(0.1, abs=0.02)
    ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", warehouse, haswell)
    first = ingest.assign_splits(warehouse)
    assert sum(first.values()) == len(sample_rows)
    assert ingest.assign_splits(warehouse) == first
    stored = dict(store.query("SELECT block_id, split FROM splits", warehouse).iter_rows())
    assert all(stored[b] == split_of(b) for b in ids)


def test_a_byte_order_mark_is_not_data_and_unknown_cpus_are_refused(haswell, warehouse, tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeff4801d8,100\n4883c0014839d875f7,250\n".encode())
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.n_read, summary.n_ingested, summary.n_quarantined) == (2, 2, 0)
    with pytest.raises(ValueError, match="'foobar': not a CPU LLVM"):
        ingest.ingest_measurements(path, "foobar", warehouse, haswell)


def test_only_a_newline_ends_a_line(haswell, warehouse, tmp_path):
    path = tmp_path / "cr.csv"
    path.write_bytes(b"4801d8,100\r\n4883c0014839d875f7,2\r50\n4829d8,80\n")
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.n_read, summary.n_ingested, summary.n_quarantined) == (3, 2, 1)
    assert store.query("SELECT line_no FROM quarantine", warehouse).item() == 2
    assert sorted(store.query("SELECT line_no FROM measurements", warehouse)["line_no"]) == [1, 3]


def test_queries_cannot_write(haswell, warehouse, tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(GOOD)
    ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    for sql in (
        "DELETE FROM blocks",
        "DROP TABLE blocks",
        "CREATE TABLE x (a INT)",
        "INSERT INTO splits VALUES ('a', 'b')",
    ):
        with pytest.raises(Exception, match="read-only"):
            store.query(sql, warehouse)
    # what the statement check of `difftune sql` would refuse first, the connection refuses too
    for sql, refusal in (
        (f"COPY (SELECT 1) TO '{tmp_path}/x.csv'", "disabled"),
        (f"ATTACH '{tmp_path}/other.duckdb'", "disabled"),
        ("SELECT * FROM read_text('/etc/hostname')", "disabled"),
        ("SET enable_external_access = true", "configuration has been locked"),
        ("SET threads = 1", "configuration has been locked"),
        ("INSTALL httpfs", "disabled"),
    ):
        with pytest.raises(Exception, match=refusal):
            store.query(sql, warehouse)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "other.duckdb").exists()
    assert _count(warehouse, "SELECT count(*) FROM blocks") == 2


def test_a_warehouse_of_an_older_version_is_migrated_by_its_first_reader(haswell, warehouse, tmp_path):
    import duckdb

    con = duckdb.connect(str(warehouse))
    for version, ddl in enumerate(schema.MIGRATIONS[:3], start=1):  # as the previous release left it
        con.execute(ddl)
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        con.execute("INSERT INTO schema_version VALUES (?)", [version])
    con.execute(
        "INSERT INTO batches VALUES ('b1', 'measurements', 'haswell', NULL, 'old.csv', 1, 1, 0, now()::TIMESTAMP)"
    )
    con.close()
    assert batch_state.batches(warehouse).select("batch_id", "status").rows() == [("b1", "ok")]
    assert _count(warehouse, "SELECT max(version) FROM schema_version") == len(schema.MIGRATIONS)
    assert _count(warehouse, "SELECT count(*) FROM usable_measurements") == 0


def test_tables_stored_before_the_failed_forwarding_penalty_load_with_its_default(haswell, warehouse):
    con = store.connect(warehouse)
    table = haswell.default_table().with_model(("memory",), "bhive")
    tables.save_table(con, "old", table, kind="imported")
    con.execute("DELETE FROM param_values WHERE param = 'store_forward_fail_penalty'")
    penalty = next(
        i + 1 for i, ddl in enumerate(schema.MIGRATIONS) if isinstance(ddl, str) and "store_forward_fail_penalty" in ddl
    )
    con.execute("DELETE FROM schema_version WHERE version >= ?", [penalty])  # as the version before it left it
    con.close()
    before = ParamTable.from_frame(
        table.to_frame().filter(pl.col("param") != "store_forward_fail_penalty"), "haswell", "19"
    )
    with pytest.raises(InvalidTable, match="store_forward_fail_penalty"):
        haswell.compile(before)
    assert tables.load_table(warehouse, "old").to_dict() == table.to_dict()


def test_schema_migrations_are_recorded(warehouse):
    con = store.connect(warehouse)
    assert schema.schema_version(con) == len(schema.MIGRATIONS)
    schema.migrate(con, warehouse)  # a second run changes nothing
    assert store.scalar(con, "SELECT count(*) FROM schema_version") == len(schema.MIGRATIONS)
    con.close()


def test_batches_an_older_version_withdrew_as_replaced_are_read_again_when_their_bytes_come_back(warehouse):
    """The version before recorded a batch its file's new bytes replaced as ``dropped``,
    so those bytes were never read again; such a record becomes ``replaced``. One a
    user dropped stays dropped."""
    con = store.connect(warehouse)
    con.execute("DELETE FROM schema_version WHERE version = ?", [len(schema.MIGRATIONS)])
    for batch, reason in (
        ("old", "replaced by batch new: its file now holds other bytes"),
        ("bad", "replaced by batch new: the machine was throttled"),  # a user's own words
    ):
        con.execute(
            "INSERT INTO batches (batch_id, kind, uarch, source_file, n_read, n_ingested, n_quarantined, "
            "ingested_at, status, status_reason) VALUES (?, 'measurements', 'haswell', '/i/hsw.csv', 1, 1, 0, "
            "now()::TIMESTAMP, 'dropped', ?)",
            [batch, reason],
        )
    con.close()
    statuses = dict(batch_state.batches(warehouse).select("batch_id", "status").rows())
    assert statuses == {"old": "replaced", "bad": "dropped"}
    assert _count(warehouse, "SELECT max(version) FROM schema_version") == len(schema.MIGRATIONS)


def test_simulations_of_an_older_warehouse_are_simulated_again(warehouse):
    """Two releases before kept simulations in a table, one before in files without
    the steady state: the table's rows move to one file per (table, shard), and then
    every file without the steady state is removed and its record forgotten (its
    shard simulates it again); predictions and evaluations are emptied likewise."""
    con = store.connect(warehouse)
    to_files = schema.MIGRATIONS.index(data_migrations.simulations_as_files)
    con.execute("DELETE FROM schema_version WHERE version > ?", [to_files])
    con.execute("DROP TABLE simulation_chunks")
    con.execute(
        "CREATE TABLE simulations (block_id VARCHAR NOT NULL, table_id VARCHAR NOT NULL, mcpu VARCHAR NOT NULL, "
        "llvm_version VARCHAR NOT NULL, iterations INTEGER NOT NULL, cycles BIGINT, status VARCHAR NOT NULL, "
        "shard VARCHAR NOT NULL, PRIMARY KEY (block_id, table_id, iterations))"
    )
    con.execute(
        "INSERT INTO simulations SELECT 'b' || i, 't' || (i % 3), 'haswell', '19', 100, "
        "CASE WHEN i % 7 = 0 THEN NULL ELSE i * 10 END, CASE WHEN i % 7 = 0 THEN 'cycle cap' ELSE 'ok' END, "
        "'shard-' || (i % 3 % 2) FROM range(1000) t(i)"
    )
    con.execute("INSERT INTO predictions VALUES ('t0', 'b1', 100, 10, 'ok', NULL)")
    con.close()
    assert store.query("SELECT * FROM simulations", warehouse).is_empty()
    assert _count(warehouse, "SELECT count(*) FROM simulation_chunks") == 0
    assert _count(warehouse, "SELECT count(*) FROM predictions") == 0
    assert not [p for p in (warehouse.parent / "simulations").rglob("*") if p.is_file()]
    assert _count(warehouse, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'simulations'") == 0


def _left_by_the_engine_before(warehouse, chunks: int, migration=data_migrations.settled_steady_state) -> list:
    """The warehouse as the engine before left it: ``migration`` (and those after it)
    not run, ``chunks`` simulation chunks recorded with their files, a prediction and
    a comparison; the chunks' files."""
    con = store.connect(warehouse)
    before = schema.MIGRATIONS.index(migration)
    con.execute("DELETE FROM schema_version WHERE version > ?", [before])
    files = [warehouse.parent / "simulations" / f"old{i}.parquet" for i in range(chunks)]
    files[0].parent.mkdir(exist_ok=True)
    for i, file in enumerate(files):
        file.write_bytes(b"stale")
        con.execute(
            f"INSERT INTO simulation_chunks VALUES ('k{i}', 'haswell', 'llvm-mca-haswell', 100, 'shard-0', "
            f"'simulations/old{i}.parquet', 1, 0, 5, 'x', now())"
        )
    con.execute("INSERT INTO predictions VALUES ('llvm-mca-haswell', 'b1', 100, 10, 'ok', 9.0)")
    con.execute("INSERT INTO comparisons VALUES ('haswell', 'l', 'd', 'x', 'extended', now(), 'steady', 0.1)")
    con.close()
    return files


def _forgotten(warehouse) -> bool:
    return all(
        _count(warehouse, f"SELECT count(*) FROM {table}") == 0
        for table in ("simulation_chunks", "predictions", "comparisons")
    )


@pytest.mark.parametrize("migration", [data_migrations.settled_steady_state, data_migrations.canonical_zero_idioms])
def test_simulations_of_an_older_engine_are_simulated_again(warehouse, migration):
    """The engines before read the steady state another way, and took a zero idiom in
    its other encoding for a dependent instruction, under llvm-mca's own model too
    (whose table ids do not change with the engine): a warehouse one of them left
    forgets its simulation chunks (their files removed), predictions, evaluations
    and comparisons, and records the version."""
    files = _left_by_the_engine_before(warehouse, 1, migration)
    assert _forgotten(warehouse)
    assert not files[0].exists()
    assert _count(warehouse, "SELECT max(version) FROM schema_version") == len(schema.MIGRATIONS)


def test_a_migration_killed_between_files_and_records_completes_on_the_next_open(warehouse):
    """A process that dies after removing some of the old chunks' files, before
    its transaction commits, leaves the records and the version unrecorded; the
    next process to open the warehouse (a fresh interpreter, as after a kill)
    removes the rest and forgets the records: no record is left without its file."""
    files = _left_by_the_engine_before(warehouse, 3)
    dying = (
        "import os, sys\n"
        "from difftune_pipeline.warehouse import connection, data_migrations\n"
        "def killed(con, db):\n"
        "    os.remove(sys.argv[2])\n"
        "    os._exit(9)\n"
        "data_migrations._forget_simulations = killed\n"
        "connection.connect(sys.argv[1])\n"
    )
    run = subprocess.run([sys.executable, "-c", dying, str(warehouse), str(files[1])], capture_output=True)
    assert run.returncode == 9, run.stderr
    assert not files[1].exists() and files[0].exists()
    with duckdb.connect(str(warehouse), read_only=True) as raw:  # as the kill left it, before any migration
        assert raw.execute("SELECT count(*) FROM simulation_chunks").fetchone()[0] == 3
    assert _forgotten(warehouse)
    assert not any(file.exists() for file in files)


def _lines_of(rows: int) -> str:
    sample = (SAMPLE / "bhive_hsw_sample.csv").read_text().splitlines()
    return "\n".join(sample[:rows] + ["zz,1", "4801d8"]) + "\n"


def _usable(db) -> int:
    return _count(db, "SELECT count(*) FROM usable_measurements")


def test_a_file_rewritten_by_a_writer_while_it_is_read_leaves_nothing(haswell, warehouse, tmp_path, monkeypatch):
    import threading

    from difftune_pipeline.ingest import reader

    path = tmp_path / "batch.csv"
    original = _lines_of(300)
    path.write_text(original)
    monkeypatch.setattr(reader, "BLOCK", 2048)  # many chunks, a transaction each
    started, written = threading.Event(), threading.Event()

    def writer():  # overwrites the file in place, as `cp small big` does, once the reader is inside it
        started.wait()
        with open(path, "r+") as fh:
            fh.write(_lines_of(20))
            fh.truncate()
        written.set()

    real = ingest._ingest_chunk

    def chunk(*args):
        real(*args)
        started.set()
        written.wait(10)

    monkeypatch.setattr(ingest, "_ingest_chunk", chunk)
    thread = threading.Thread(target=writer)
    thread.start()
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell, batch_id=_batch_of(original, tmp_path))
    thread.join()
    assert summary.status == "changed" and "changed while it was read" in summary.note
    assert (summary.n_read, summary.n_ingested) == (0, 0)
    for table in ("measurements", "quarantine"):
        assert _count(warehouse, f"SELECT count(*) FROM {table}") == 0  # nothing of it kept
    assert _count(warehouse, "SELECT status FROM batches") == "changed"

    monkeypatch.setattr(ingest, "_ingest_chunk", real)
    small = ingest.ingest_measurements(path, "haswell", warehouse, haswell)  # the new bytes: a batch of their own
    assert small.status == "ok" and (small.n_ingested, small.n_quarantined) == (20, 2)
    path.write_text(original)  # the old bytes back: ingested now, every line
    again = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert again.batch_id == summary.batch_id and again.status == "ok" and not again.already_ingested
    assert (again.n_read, again.n_ingested, again.n_quarantined) == (302, 300, 2)
    assert _usable(warehouse) == 300  # the file's bytes now: the small batch they replace is withdrawn
    assert f"batch {small.batch_id}, whose 20 measurements this batch replaces" in again.note
    assert _count(warehouse, "SELECT count(*) FROM quarantine") == 4


def _batch_of(text: str, tmp_path) -> str:
    copy = tmp_path / "copy.csv"
    copy.write_text(text)
    return ingest.file_batch_id(copy, ingest.batch_scope("measurements", "haswell"))


def test_a_killed_ingestion_is_never_usable_and_is_read_again_from_nothing(haswell, warehouse, tmp_path, monkeypatch):
    from difftune_pipeline.ingest import reader

    path = tmp_path / "batch.csv"
    path.write_text(_lines_of(300))
    monkeypatch.setattr(reader, "BLOCK", 2048)
    real, calls = ingest._ingest_chunk, []

    def killed(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a killed process stops: between two committed chunks
        real(*args)

    monkeypatch.setattr(ingest, "_ingest_chunk", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert _count(warehouse, "SELECT status FROM batches") == "ingesting"
    assert _count(warehouse, "SELECT count(*) FROM measurements") > 0 and _usable(warehouse) == 0
    monkeypatch.setattr(ingest, "_ingest_chunk", real)
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert summary.status == "ok" and (summary.n_ingested, summary.n_quarantined) == (300, 2)
    assert _count(warehouse, "SELECT count(*) FROM measurements") == _usable(warehouse) == 300  # none twice
    assert _count(warehouse, "SELECT count(*) FROM quarantine") == 2


def test_unusual_but_good_rows_are_measurements(haswell, warehouse, tmp_path):
    """Spaces, exponents, signs, upper case, a no-break space (read one by one)."""
    path = tmp_path / "batch.csv"
    path.write_text(" 4801D8 , 1e2\n4883c0014839d875f7,\u00a0+250.\n4801c0,.5e3\n")
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.n_ingested, summary.n_quarantined) == (3, 0)
    values = store.query("SELECT cycles_per_100 FROM measurements ORDER BY line_no", warehouse)["cycles_per_100"]
    assert values.to_list() == [100.0, 250.0, 500.0]


EDGE_ROWS = [
    "4801d8,100", " 4801D8 , 1e2", "4801d8,\t+250.", "4801d8,.5e3", "4801d8,\u00a0100", "4801d8,1_000",
    "4801d8,\u0661\u0660\u0660", "4801d8,1e400", "4801d8,1e-400", "4801d8,0", "4801d8,-0", "4801d8,-3",
    "4801d8,nan", "4801d8,inf", "4801d8,1e8", "4801d8,100000001", "4801d8,1", "4801d8,0.99", "abc,1",
    "zz,1", ",1", "4801d8", "4801d8,1,2", "4801d8,", "4801d8,1e", "4801d8,.", "4801d8,+", "4801d8, 1 2",
    "\x00\x01", "4801d8,1\r", "48 01,5", "0x4801,5", "4801d8,١٠٠", "4801d8,100" + "0" * 400,
]  # fmt: skip


@pytest.mark.parametrize("per_iteration", [False, True])
def test_rows_read_column_wise_are_read_as_one_by_one(per_iteration):
    """The column-wise reader and the one-row-at-a-time one agree on every row: kept or
    refused, the value, the reason."""
    scale = 100.0 if per_iteration else 1.0
    bounds = tuple(b / scale for b in rows.THROUGHPUT_BOUNDS)
    chunk = list(enumerate(EDGE_ROWS, start=1))
    fast, fast_bad = rows.measurement_rows(chunk, bounds)
    slow, slow_bad = rows.split_rows(chunk, "cycles", False, None, bounds)
    assert sorted(fast.rows()) == sorted((n, h, v) for n, _, h, v in slow)
    assert sorted(fast_bad) == sorted(slow_bad)
    assert fast.height and fast_bad  # both kinds were there
    empty, nothing = rows.measurement_rows([], bounds)
    assert empty.is_empty() and nothing == []


@pytest.mark.parametrize("text", ["\n", "  \t", "4801d8,100\n  \t", "\n\n4801d8,100\r", "4801d8,100"])
def test_files_of_blank_lines_or_without_a_last_newline(haswell, warehouse, tmp_path, text):
    path = tmp_path / "batch.csv"
    path.write_bytes(text.encode())
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    measured = "4801d8" in text
    assert (summary.n_read, summary.n_ingested) == ((1, 1) if measured else (0, 0))
    assert summary.status == ("ok" if measured else "failed_sanity")  # "no row became a measurement"


def test_a_batch_a_hundred_times_too_slow_fails_its_sanity_check(haswell, warehouse, tmp_path, sample_rows):
    """Cycles per 100 iterations in a file named as cycles per iteration read a hundred
    times too slow; no sane batch's median block takes 20 cycles an instruction."""
    lines = "".join(f"{h},{c}\n" for h, c in sample_rows[:60])
    (tmp_path / "right.csv").write_text(lines)
    (tmp_path / "mislabelled.per_iteration.csv").write_text(lines)
    right = ingest.ingest_measurements(tmp_path / "right.csv", "haswell", warehouse, haswell)
    wrong = ingest.ingest_measurements(
        tmp_path / "mislabelled.per_iteration.csv", "haswell", warehouse, haswell, unit="cycles_per_iteration"
    )
    assert (right.status, wrong.status) == ("ok", "failed_sanity")
    reason = store.query("SELECT status_reason FROM batches WHERE batch_id = ?", warehouse, [wrong.batch_id]).item()
    assert "a hundred times too slow" in reason and "instructions per cycle" in reason
    few = tmp_path / "few.per_iteration.csv"  # too few for a median to say anything: judged as before
    few.write_text("".join(f"{h},{c}\n" for h, c in sample_rows[60:65]))
    assert ingest.ingest_measurements(few, "haswell", warehouse, haswell, unit="cycles_per_iteration").status == "ok"


def test_a_file_rewritten_after_it_was_ingested_replaces_its_earlier_batch(
    haswell, warehouse, tmp_path, sample_rows, monkeypatch
):
    """A file that now holds other bytes (corrected values, a damaged copy of the same
    size) is a new batch, and its earlier batch is withdrawn in the same transaction:
    the file's measurements are the new ones, never both averaged, and the note says so.
    Another file with the same blocks is another measurement, and stays."""
    path, other = tmp_path / "hsw.csv", tmp_path / "other.csv"
    path.write_text("".join(f"{h},{c}\n" for h, c in sample_rows[:30]))
    other.write_text("".join(f"{h},{c}\n" for h, c in reversed(sample_rows[:30])))  # other bytes, same blocks
    first = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    kept = ingest.ingest_measurements(other, "haswell", warehouse, haswell)
    path.write_text("".join(f"{h},{float(c) + 1}\n" for h, c in sample_rows[:30]))  # same size or not: other bytes
    second = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (first.status, second.status, second.n_ingested) == ("ok", "ok", 30)
    assert f"batch {first.batch_id}, whose 30 measurements this batch replaces" in second.note
    rows = store.query("SELECT batch_id, status, status_reason FROM batches ORDER BY ingested_at", warehouse).rows()
    why = f"replaced by batch {second.batch_id}: its file now holds other bytes"
    assert rows[0] == (first.batch_id, "replaced", why)
    assert [r[1] for r in rows[1:]] == ["ok", "ok"]
    assert sorted(_usable_by_batch(warehouse)) == sorted([(kept.batch_id, 30), (second.batch_id, 30)])
    path.write_text("".join(f"{h},{c}\n" for h, c in sample_rows[:30]))  # the first bytes again: they count again
    again = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (again.batch_id, again.status, again.already_ingested) == (first.batch_id, "ok", False)
    assert f"batch {second.batch_id}, whose 30 measurements this batch replaces" in again.note
    assert sorted(_usable_by_batch(warehouse)) == sorted([(kept.batch_id, 30), (first.batch_id, 30)])
    assert _count(warehouse, "SELECT count(*) FROM quarantine") == 0  # read again from nothing: no line twice
    with store.writer(warehouse) as con:  # a batch a user withdrew stays withdrawn, whatever its file holds
        batch_state.drop_batch(con, first.batch_id, "bad machine")
    assert ingest.ingest_measurements(path, "haswell", warehouse, haswell).already_ingested
    bad = tmp_path / "hsw.csv"  # bytes that fail their sanity check replace nothing
    bad.write_text("".join(f"{h},{float(c) / 100:g}\n" for h, c in sample_rows[:30]))
    assert ingest.ingest_measurements(bad, "haswell", warehouse, haswell).status == "failed_sanity"
    assert (
        store.query("SELECT status FROM batches WHERE batch_id = ?", warehouse, [second.batch_id]).item() == "replaced"
    )
    path.write_text("".join(f"{h},{float(c) + 1}\n" for h, c in sample_rows[:30]))  # the second bytes again
    assert ingest.ingest_measurements(path, "haswell", warehouse, haswell).status == "ok"
    monkeypatch.chdir(tmp_path)  # the same file named from its folder is the same file
    path.write_text("".join(f"{h},{float(c) + 2}\n" for h, c in sample_rows[:30]))
    third = ingest.ingest_measurements(Path("hsw.csv"), "haswell", warehouse, haswell)
    assert f"batch {second.batch_id}, whose 30 measurements this batch replaces" in third.note


def _usable_by_batch(warehouse) -> list[tuple]:
    return store.query("SELECT batch_id, count(*) FROM usable_measurements GROUP BY 1", warehouse).rows()


def test_an_older_version_of_a_file_read_while_a_newer_one_was_ingested_replaces_nothing(
    haswell, warehouse, tmp_path, sample_rows, monkeypatch
):
    """Two readers of one file: the first still reads the old bytes (its open file) when
    the file is replaced and a second reader ingests the new ones. The first's bytes
    hash to its batch, but a batch of its file was made usable since it began: it keeps
    nothing, rather than withdraw the newer batch as the file's earlier bytes; also when
    the file is gone by then (archived once ingested)."""
    path, new = tmp_path / "hsw.csv", tmp_path / "hsw.csv.new"
    path.write_text(_lines_of(300))
    new.write_text("".join(f"{h},{float(c) + 1}\n" for h, c in sample_rows[:30]))
    newer = []

    def replace_and_ingest():
        if not newer:  # once: the second reader's own chunks pass by
            newer.append(None)
            os.replace(new, path)  # the first reader's open file keeps the old bytes
            newer[0] = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
            path.unlink()

    _between_chunks(monkeypatch, replace_and_ingest)
    older = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert newer[0].status == "ok" and not newer[0].note
    assert older.status == "changed" and f"was ingested as batch {newer[0].batch_id} while this reading" in older.note
    assert _usable_by_batch(warehouse) == [(newer[0].batch_id, 30)]
    statuses = dict(store.query("SELECT batch_id, status FROM batches", warehouse).rows())
    assert statuses == {newer[0].batch_id: "ok", older.batch_id: "changed"}
    assert _count(warehouse, "SELECT count(*) FROM measurements") == 30  # the older reader's rows are gone


def test_a_batch_of_many_rows_is_judged_within_the_ingestions_memory(haswell, warehouse, tmp_path, monkeypatch):
    """The sanity check's median of a batch is taken in bounded memory: an exact median
    holds every row's value, and a batch of 6,000,000 rows failed under the ingestion's
    128 MB every time it was read. Here 400,000 rows under 16 MB."""
    monkeypatch.setattr(ingest, "INGEST_MEMORY", "16MB")
    path = tmp_path / "many.csv"
    path.write_text((SAMPLE / "bhive_hsw_sample.csv").read_text() * 200)
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert (summary.status, summary.n_ingested) == ("ok", 400_000)


def _between_chunks(monkeypatch, action, at: int = 1):
    """Run ``action`` after the ``at``-th chunk of a file is committed, before the next."""
    from difftune_pipeline.ingest import reader

    real = reader.NumberedLines.chunks

    def chunks(self):
        for i, chunk in enumerate(real(self)):
            if i == at:
                action()
            yield chunk

    monkeypatch.setattr(reader, "BLOCK", 2048)
    monkeypatch.setattr(reader.NumberedLines, "chunks", chunks)


def test_a_batch_dropped_while_it_is_read_stays_dropped(haswell, warehouse, tmp_path, monkeypatch):
    path = tmp_path / "batch.csv"
    path.write_text(_lines_of(300))
    batch = _batch_of(_lines_of(300), tmp_path)

    def drop():
        with store.writer(warehouse) as con:
            assert batch_state.drop_batch(con, batch, "withdrawn mid-read")["rows_removed"] > 0

    _between_chunks(monkeypatch, drop)
    summary = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert summary.status == "dropped" and "dropped or taken over" in summary.note
    assert _count(warehouse, "SELECT count(*) FROM measurements") == 0  # nothing added after the drop
    assert _count(warehouse, "SELECT status FROM batches") == "dropped"
    assert ingest.ingest_measurements(path, "haswell", warehouse, haswell).already_ingested


def test_a_batch_a_live_reader_holds_is_left_to_it_and_a_dead_ones_is_taken_over(
    haswell, warehouse, tmp_path, monkeypatch
):
    path = tmp_path / "batch.csv"
    path.write_text(_lines_of(300))
    seen = []
    _between_chunks(monkeypatch, lambda: seen.append(ingest.ingest_measurements(path, "haswell", warehouse, haswell)))
    first = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    (second,) = seen  # tried while the first read it: left to it, nothing added
    assert second.status == "ingesting" and "is being ingested by process" in second.note
    assert first.status == "ok" and _usable(warehouse) == _count(warehouse, "SELECT count(*) FROM measurements") == 300

    with store.writer(warehouse) as con:  # as a reader that died (no such process) left it
        con.execute("UPDATE batches SET status = 'ingesting', owner = ?", [f"{owner.HOST} 999999999 abc"])
    monkeypatch.undo()
    again = ingest.ingest_measurements(path, "haswell", warehouse, haswell)
    assert again.status == "ok" and not again.already_ingested
    assert _count(warehouse, "SELECT count(*) FROM measurements") == 300  # read again from nothing, once


def test_two_processes_ingesting_one_batch_store_its_rows_once(warehouse, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "batch.csv"
    path.write_text(_lines_of(1500))
    script = "; ".join(
        [
            "import sys",
            "from difftune_pipeline.ingest import batches, reader",
            "from difftune_pipeline.engine import Engine",
            "reader.BLOCK = 4096",
            "s = batches.ingest_measurements(sys.argv[1], 'haswell', sys.argv[2], Engine('haswell'))",
            "print(s.status, s.n_ingested)",
        ]
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), str(warehouse)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o[0] for o in outputs) in (["ingesting", "ok"], ["ok", "ok"])  # one read it; the other left it
    assert _count(warehouse, "SELECT count(*) FROM measurements") == _usable(warehouse) == 1500
    assert _count(warehouse, "SELECT count(*) FROM quarantine") == 2

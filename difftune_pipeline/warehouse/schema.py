"""The warehouse schema: each migration brings it from one version to the next,
each in its own transaction, so an old warehouse file is upgraded in place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb

from difftune_pipeline.warehouse import data_migrations

# Each entry migrates the schema from version i to i + 1.
MIGRATIONS: list[str | Callable[[duckdb.DuckDBPyConnection, Path], None]] = [
    """
    CREATE TABLE blocks (
        block_id   VARCHAR PRIMARY KEY,   -- sha256 of the canonical lowercase hex, 16 hex digits
        hex        VARCHAR NOT NULL,
        n_insts    INTEGER,
        asm        VARCHAR,               -- AT&T, one instruction per line
        opcodes    VARCHAR[],             -- LLVM opcode names
        status     VARCHAR NOT NULL,      -- ok | quarantined
        reason     VARCHAR                -- why quarantined
    );
    CREATE TABLE block_sources (
        block_id   VARCHAR NOT NULL,
        app        VARCHAR NOT NULL,      -- source application (corpus file stem)
        frequency  DOUBLE NOT NULL,       -- static frequency in that application (BHive's weight)
        batch_id   VARCHAR NOT NULL,
        PRIMARY KEY (block_id, app)
    );
    CREATE TABLE splits (
        block_id   VARCHAR PRIMARY KEY,
        split      VARCHAR NOT NULL       -- train | val | test, from the block hash
    );
    CREATE TABLE batches (
        batch_id   VARCHAR PRIMARY KEY,   -- sha256 of scope and file bytes, 16 hex digits
        kind       VARCHAR NOT NULL,      -- measurements | corpus
        uarch      VARCHAR,               -- measurements: the µarch measured
        app        VARCHAR,               -- corpus: the application
        source_file VARCHAR NOT NULL,
        n_read     BIGINT NOT NULL,
        n_ingested BIGINT NOT NULL,
        n_quarantined BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL
    );
    CREATE TABLE measurements (
        block_id   VARCHAR NOT NULL,
        uarch      VARCHAR NOT NULL,
        cycles_per_100 DOUBLE NOT NULL,   -- BHive's unit: cycles per 100 iterations
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL,
        PRIMARY KEY (block_id, uarch, batch_id)
    );
    CREATE TABLE quarantine (
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        raw        VARCHAR,
        reason     VARCHAR NOT NULL,
        quarantined_at TIMESTAMP NOT NULL,
        PRIMARY KEY (batch_id, line_no)
    );
    """,
    """
    CREATE TABLE param_tables (
        table_id   VARCHAR PRIMARY KEY,
        mcpu       VARCHAR NOT NULL,
        llvm_version VARCHAR NOT NULL,
        kind       VARCHAR NOT NULL,      -- default | sampled | learned | imported | baseline | visited (tuning)
        preset     VARCHAR,               -- sampled: the sampling preset
        seed       BIGINT,                -- sampled: the seed (values are regenerated from preset+seed)
        parent_id  VARCHAR,               -- learned: the table it started from
        space_id   VARCHAR,               -- the parameter space (rows x columns) it was drawn or learned in
        created_at TIMESTAMP NOT NULL,
        note       VARCHAR
    );
    CREATE TABLE param_values (
        table_id   VARCHAR NOT NULL,
        opcode     VARCHAR NOT NULL,      -- parameter-row key ('*' for globals)
        param      VARCHAR NOT NULL,      -- latency | uops | read_advance | port:<resource> | <global>
        idx        INTEGER NOT NULL,      -- def index (latency), use index (read_advance), else 0
        value      BIGINT NOT NULL,
        PRIMARY KEY (table_id, opcode, param, idx)
    );
    CREATE TABLE simulations (
        block_id   VARCHAR NOT NULL,
        table_id   VARCHAR NOT NULL,
        mcpu       VARCHAR NOT NULL,
        llvm_version VARCHAR NOT NULL,
        iterations INTEGER NOT NULL,
        cycles     BIGINT,                -- engine Total Cycles; NULL when status is not ok
        status     VARCHAR NOT NULL,
        shard      VARCHAR NOT NULL,
        PRIMARY KEY (block_id, table_id, iterations)
    );
    CREATE TABLE surrogate_runs (
        run_id     VARCHAR PRIMARY KEY,   -- fingerprint of data, configuration and code version
        mcpu       VARCHAR NOT NULL,
        model      VARCHAR NOT NULL,
        checkpoint VARCHAR NOT NULL,
        n_train    BIGINT NOT NULL,
        n_heldout  BIGINT NOT NULL,
        heldout_mape DOUBLE NOT NULL,      -- fidelity against the engine on held-out (block, table) pairs
        heldout_kendall_tau DOUBLE,
        train_seconds DOUBLE NOT NULL,
        config     VARCHAR NOT NULL,
        created_at TIMESTAMP NOT NULL
    );
    CREATE TABLE predictions (
        table_id   VARCHAR NOT NULL,
        block_id   VARCHAR NOT NULL,
        iterations INTEGER NOT NULL,
        cycles     BIGINT,                -- engine Total Cycles (cycles per 100 iterations at 100)
        status     VARCHAR NOT NULL,
        PRIMARY KEY (table_id, block_id, iterations)
    );
    CREATE TABLE evaluations (
        table_id   VARCHAR NOT NULL,
        uarch      VARCHAR NOT NULL,
        split      VARCHAR NOT NULL,
        slice      VARCHAR NOT NULL,      -- all | app:<name> | ml:<kernel family> | len:<range> | mem:<kind>
        n          BIGINT NOT NULL,
        mape       DOUBLE,
        kendall_tau DOUBLE,
        evaluated_at TIMESTAMP NOT NULL,
        PRIMARY KEY (table_id, uarch, split, slice)
    );
    """,
    """
    -- Repeated measurements of a block in one batch (nanoBench repeats) are rows of their own.
    CREATE TABLE measurements_v3 (
        block_id   VARCHAR NOT NULL,
        uarch      VARCHAR NOT NULL,
        cycles_per_100 DOUBLE NOT NULL,
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL,
        PRIMARY KEY (block_id, uarch, batch_id, line_no)
    );
    INSERT INTO measurements_v3 SELECT block_id, uarch, cycles_per_100, batch_id, source_file, line_no, ingested_at
        FROM measurements;
    DROP TABLE measurements;
    ALTER TABLE measurements_v3 RENAME TO measurements;
    CREATE TABLE block_features (
        block_id   VARCHAR NOT NULL,
        mcpu       VARCHAR NOT NULL,
        table_id   VARCHAR NOT NULL,      -- the parameter table the table-dependent features are computed under
        n_insts    BIGINT NOT NULL,
        n_uops     BIGINT NOT NULL,
        regs_read  BIGINT NOT NULL,       -- distinct registers read (widened: EAX counts as RAX); zero idioms read none
        regs_written BIGINT NOT NULL,
        loads      BIGINT NOT NULL,       -- instructions that may load / store (LLVM's instruction descriptions)
        stores     BIGINT NOT NULL,
        memory_deps BIGINT NOT NULL,      -- store -> load through the same address expression
        loop_carried_memory_deps BIGINT NOT NULL,
        chain_cycles DOUBLE NOT NULL,     -- critical register-dependency path of one iteration (latencies, ReadAdvance)
        loop_carried_cycles DOUBLE NOT NULL,   -- recurrence per iteration, unlimited resources
        port_pressure_cycles DOUBLE NOT NULL,  -- most loaded resource per iteration
        dispatch_cycles DOUBLE NOT NULL,  -- µops / dispatch width per iteration
        bottleneck VARCHAR NOT NULL,      -- port_pressure | dispatch | loop_carried_latency
        PRIMARY KEY (block_id, table_id)
    );
    """,
    """
    -- A batch can be withdrawn (dropped) or fail its sanity check; neither feeds tuning.
    ALTER TABLE batches ADD COLUMN status VARCHAR DEFAULT 'ok';  -- ok | failed_sanity | dropped
    ALTER TABLE batches ADD COLUMN status_reason VARCHAR;        -- why failed or dropped
    ALTER TABLE batches ADD COLUMN status_at TIMESTAMP;
    -- The measurements that tuning and evaluation read: those of batches whose status is ok.
    CREATE VIEW usable_measurements AS
        SELECT m.* FROM measurements m JOIN batches b USING (batch_id) WHERE b.status = 'ok';
    """,
    """
    -- Where each load and store of a block lands under a harness model (the
    -- extended model's memory dependencies), and how the harness model fared.
    CREATE TABLE block_harness (
        block_id   VARCHAR NOT NULL,
        harness    VARCHAR NOT NULL,      -- the model asked for: bhive | none
        addresses  VARCHAR NOT NULL,      -- where the addresses come from: bhive (emulated) | none (symbolic)
        status     VARCHAR NOT NULL,      -- ok | why the harness model fell back to symbolic addresses
        accesses   BIGINT NOT NULL,
        seconds    DOUBLE NOT NULL,       -- the emulation's cost
        PRIMARY KEY (block_id, harness)
    );
    CREATE TABLE block_accesses (
        block_id   VARCHAR NOT NULL,
        harness    VARCHAR NOT NULL,
        seq        INTEGER NOT NULL,      -- order of the access within the recorded run
        iteration  INTEGER NOT NULL,
        instr      INTEGER NOT NULL,      -- instruction index in the block
        address    UBIGINT NOT NULL,
        bytes      INTEGER NOT NULL,
        is_store   BOOLEAN NOT NULL,
        PRIMARY KEY (block_id, harness, seq)
    );
    -- mean (predicted - measured) / measured: whether a slice is predicted too fast or too slow
    ALTER TABLE evaluations ADD COLUMN mean_signed_error DOUBLE;
    """,
    """
    -- The memory mechanism's failed store-to-load forwarding: tables stored
    -- before it get its default (extended.py), so that they load again.
    INSERT INTO param_values
        SELECT table_id, '*', 'store_forward_fail_penalty', 0, 10 FROM param_values
        WHERE opcode = '*' AND param = 'mechanism:memory'
        AND table_id NOT IN (SELECT table_id FROM param_values WHERE param = 'store_forward_fail_penalty');
    """,
    """
    -- What each evaluation compared: llvm-mca as shipped (LLVM's table, llvm-mca's
    -- own model), LLVM's table under the model the pipeline chose, and the learned table.
    CREATE TABLE IF NOT EXISTS comparisons (
        uarch      VARCHAR NOT NULL,
        llvm_mca_id VARCHAR NOT NULL,
        default_id VARCHAR NOT NULL,
        learned_id VARCHAR NOT NULL,
        model      VARCHAR NOT NULL,      -- the chosen model: llvm-mca | extended | llvm-mca+<mechanism>…
        evaluated_at TIMESTAMP NOT NULL,
        PRIMARY KEY (uarch, llvm_mca_id, default_id, learned_id)
    );
    -- The slices each evaluated block belongs to (all, app:…, ml:…, len:…, mem:…, bottleneck:…, fe:…).
    CREATE TABLE IF NOT EXISTS block_slices (
        uarch      VARCHAR NOT NULL,
        block_id   VARCHAR NOT NULL,
        slice      VARCHAR NOT NULL,
        PRIMARY KEY (uarch, block_id, slice)
    );
    """,
    data_migrations.simulations_as_files,
    data_migrations.steady_state,
    """
    -- The front end's stall on a length-changing prefix: tables stored before it get
    -- its default (extended.py), so that they load again.
    INSERT INTO param_values
        SELECT table_id, '*', 'lcp_penalty', 0, 3 FROM param_values
        WHERE opcode = '*' AND param = 'mechanism:front_end'
        AND table_id NOT IN (SELECT table_id FROM param_values WHERE param = 'lcp_penalty');
    """,
    """
    -- Measurements without a primary key: its index held every key in memory while a
    -- batch was ingested (GBs for tens of millions of rows). A batch's lines are added
    -- by the one reader that holds it (batches.owner), so they are unique without it.
    CREATE TABLE measurements_v4 (
        block_id   VARCHAR NOT NULL,
        uarch      VARCHAR NOT NULL,
        cycles_per_100 DOUBLE NOT NULL,
        batch_id   VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        line_no    BIGINT NOT NULL,
        ingested_at TIMESTAMP NOT NULL
    );
    INSERT INTO measurements_v4 SELECT block_id, uarch, cycles_per_100, batch_id, source_file, line_no, ingested_at
        FROM measurements;
    DROP TABLE measurements;
    ALTER TABLE measurements_v4 RENAME TO measurements;
    -- The reader of an ingesting batch: host, process and ingestion (ingest/owner.py).
    ALTER TABLE batches ADD COLUMN IF NOT EXISTS owner VARCHAR;
    """,
    """
    -- The data version each asset partition reported when it was last materialised
    -- here (warehouse/versions.py): what lets a run skip what is up to date, and only
    -- when the warehouse, not just the Dagster instance, holds it.
    CREATE TABLE IF NOT EXISTS asset_versions (
        asset      VARCHAR NOT NULL,
        partition  VARCHAR NOT NULL,      -- '' for an unpartitioned asset
        data_version VARCHAR NOT NULL,
        recorded_at TIMESTAMP NOT NULL,
        PRIMARY KEY (asset, partition)
    );
    """,
    "ALTER TABLE block_slices ADD COLUMN IF NOT EXISTS code_version VARCHAR",  # slices other code drew: drawn again
    data_migrations.settled_steady_state,
    data_migrations.canonical_zero_idioms,
    data_migrations.replaced_batches,
]


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    return con.execute("SELECT max(version) FROM schema_version").fetchall()[0][0] or 0


def migrate(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    """Bring the schema of warehouse file ``db`` to the newest version, each step
    in its own transaction (a step that moves data out of the file is a function)."""
    version = schema_version(con)
    for target, step in enumerate(MIGRATIONS[version:], start=version + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            if callable(step):
                step(con, db)
            else:
                con.execute(step)
            con.execute("INSERT INTO schema_version VALUES (?)", [target])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise

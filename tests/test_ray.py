"""Simulations on Ray workers: the same results as the threads path, a killed
worker loses nothing, and the Dagster resource chooses the path."""

import dataclasses
import functools
import os
import signal
import sys
import time

import numpy as np
import pytest

from conftest import SAMPLE
from difftune_pipeline import harness, steps
from difftune_pipeline.config import override, settings_for
from difftune_pipeline.defs import resources
from difftune_pipeline.defs.resources import Compute, compute_from_env
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.engine.ray_engine import RayEngine, WorkerPool
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.warehouse import connection as store
from difftune_pipeline.warehouse import simulation_files

SETTINGS = settings_for("sample", {"tables_per_preset": 2, "blocks_per_table": 150, "shards": 1})


@pytest.fixture(scope="module")
def pool():
    import ray

    workers = resources._ray_pool(2, "")  # the pool the Compute resource hands out
    yield workers
    workers.close()
    ray.shutdown()


def _ctx(db, engine, sample=True):
    if sample:
        ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", db, Engine("haswell"))
        ingest.assign_splits(db)
    return steps.StepContext(str(db), engine, SETTINGS)


def _simulations(db):
    return store.query(
        "SELECT block_id, table_id, cycles, status FROM simulations ORDER BY block_id, table_id", db
    ).rows()


def test_ray_pairs_equal_the_engine_with_bad_tables_and_asm_blocks(pool, haswell, sample_rows):
    ray_engine = RayEngine("haswell", pool)
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:300]])
    blocks.append(haswell.parse_asm("addq %rax, %rbx\nimulq %rbx, %rax"))  # travels as its text
    aliasing = haswell.parse_asm("movq (%r12), %rdx\nmovq %rcx, (%rdx,%rax,8)\naddl $1, 8(%r12)")
    blocks.append(harness.accesses(aliasing, "bhive").attach(aliasing))  # with BHive's one physical page
    base = haswell.default_table(blocks)
    key = next(k for b in blocks for k in b.row_keys if base.rows[k]["latency"])
    slower = ParamTable(base.mcpu, base.llvm_version, {**base.globals, "dispatch_width": 2}, {})
    bad = ParamTable(base.mcpu, base.llvm_version, base.globals, {key: {**base.rows[key], "latency": [-5]}})
    tables = [None, slower, bad, base.with_model(("memory", "physical_alias"), "bhive")]
    rng = np.random.default_rng(0)
    bidx, tidx = rng.integers(0, len(blocks), 2000), rng.integers(0, len(tables), 2000)
    bidx[-1], tidx[-1] = len(blocks) - 1, len(tables) - 1  # the addresses' physical page travels too
    want = haswell.simulate_pairs(blocks, tables, bidx, tidx)
    got = ray_engine.simulate_pairs(blocks, tables, bidx, tidx)
    assert np.array_equal(got.cycles, want.cycles) and got.status == want.status
    assert any(s.startswith("invalid table") for s in got.status)  # a bad table fails only its pairs
    own_pages = aliasing.with_accesses(list(blocks[-1].accesses), True, False)  # the same addresses, own pages
    assert want.cycles[-1] > haswell.simulate([own_pages], tables[-1]).cycles[0]
    before = pool.tasks
    again = ray_engine.simulate_pairs(blocks, tables, bidx[:10], tidx[:10])  # the block list is shipped once
    assert again.status == want.status[:10] and pool.tasks == before + 1
    assert ray_engine.simulate_pairs(blocks, tables, [], []).cycles.size == 0


def test_a_ray_shard_equals_the_threads_shard(pool, haswell, tmp_path):
    threads = _ctx(tmp_path / "threads" / "w.duckdb", haswell)
    on_ray = _ctx(tmp_path / "ray" / "w.duckdb", RayEngine("haswell", pool))
    steps.sampled_tables(threads)
    steps.sampled_tables(on_ray)
    a = steps.simulate_shard(threads, 0, chunk=250)
    b = steps.simulate_shard(on_ray, 0, chunk=250)
    assert a.simulated == b.simulated == a.planned == 600
    assert a.data_version == b.data_version
    assert _simulations(tmp_path / "threads" / "w.duckdb") == _simulations(tmp_path / "ray" / "w.duckdb")


@dataclasses.dataclass(frozen=True)
class DyingWriter(simulation_files.ChunkWriter):
    """The first chunk it writes kills its worker half-way through the file."""

    marker: str = ""

    def __call__(self, chunk, result):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            folder = os.path.join(self.root, self.mcpu, self.shard)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f".{chunk.key}.dying.tmp"), "wb") as half:
                half.write(b"PAR1 half a file")
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(chunk, result)


@pytest.mark.slow
def test_a_worker_killed_mid_chunk_loses_and_duplicates_nothing(pool, haswell, tmp_path, monkeypatch):
    import ray

    on_ray = _ctx(tmp_path / "ray" / "w.duckdb", RayEngine("haswell", pool))
    threads = _ctx(tmp_path / "threads" / "w.duckdb", haswell)
    steps.sampled_tables(on_ray)
    steps.sampled_tables(threads)
    before = pool.pids()
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    dying = functools.partial(DyingWriter, marker=str(tmp_path / "died"))
    monkeypatch.setattr(simulation_files, "ChunkWriter", dying)  # the writer each chunk's worker is given
    out = steps.simulate_shard(on_ray, 0, chunk=100)
    assert (tmp_path / "died").exists() and out.simulated == out.planned == 600
    time.sleep(0.1)
    assert set(pool.pids()) != set(before)  # Ray restarted the worker and retried its chunk
    half = list((tmp_path / "ray" / "simulations").rglob("*.dying.tmp"))
    assert len(half) == 1  # the dead worker's half file: never read (it is no chunk's file)
    monkeypatch.undo()
    steps.simulate_shard(threads, 0)
    assert _simulations(tmp_path / "ray" / "w.duckdb") == _simulations(tmp_path / "threads" / "w.duckdb")
    dupes = store.query(
        "SELECT count(*) FROM (SELECT block_id, table_id FROM simulations GROUP BY ALL HAVING count(*) > 1)",
        tmp_path / "ray" / "w.duckdb",
    )
    assert dupes.item() == 0
    chunks = store.query("SELECT count(*), sum(rows)::BIGINT FROM simulation_chunks", tmp_path / "ray" / "w.duckdb")
    assert chunks.rows() == [(8, 600)]  # 4 tables of 150 blocks in chunks of 100: each recorded once
    again = steps.simulate_shard(on_ray, 0, chunk=100)  # the next run of the shard sweeps the half file away
    assert (again.simulated, again.stale_files_removed) == (0, 1) and not half[0].exists()


def test_the_compute_resource_chooses_the_path(pool, monkeypatch):
    assert type(Compute().engine("haswell")) is Engine
    engine = Compute(backend="ray", workers=2).engine("skylake")
    assert isinstance(engine, RayEngine) and engine.mcpu == "skylake" and len(engine.pool) == 2
    assert Compute(backend="ray", workers=2).engine("haswell").pool is engine.pool  # one pool for every µarch
    assert Compute(backend="ray").describe().startswith("ray (local")
    with pytest.raises(ValueError, match="threads or ray"):
        Compute(backend="spark").engine("haswell")
    monkeypatch.setenv("DIFFTUNE_COMPUTE", "dask")
    with pytest.raises(ValueError, match="threads or ray"):
        compute_from_env()
    monkeypatch.setenv("DIFFTUNE_COMPUTE", "ray")
    monkeypatch.setenv("DIFFTUNE_RAY_WORKERS", "3")
    assert compute_from_env().workers == 3
    for bad in ("two", "-1"):
        monkeypatch.setenv("DIFFTUNE_RAY_WORKERS", bad)
        with pytest.raises(ValueError, match="a number of workers"):
            compute_from_env()
    with pytest.raises(ValueError, match="0 \\(one per free CPU\\) or more"):
        WorkerPool(-1)
    with pytest.raises(ValueError, match="1000 workers need 1000 CPUs; the Ray cluster has 2"):
        WorkerPool(1000)
    closed = WorkerPool(1)
    closed.close()
    with pytest.raises(RuntimeError, match="pool is closed"):
        RayEngine("haswell", closed).simulate_pairs([], [None], [0], [0])


@pytest.mark.slow
def test_a_tuning_step_searches_on_ray(pool, tmp_path):
    """The direct search's candidates on Ray: the same learned table as on threads."""
    settings = override(SETTINGS, {"tuner": "direct", "search.budget": 1500, "search.rounds": 1})
    threads = steps.StepContext(str(tmp_path / "threads" / "w.duckdb"), Engine("haswell"), settings)
    on_ray = steps.StepContext(str(tmp_path / "ray" / "w.duckdb"), RayEngine("haswell", pool), settings)
    for ctx in (threads, on_ray):
        _ctx(ctx.db, ctx.engine)
        steps.default_params(ctx)
    a, b = steps.learn(threads, log=lambda _: None), steps.learn(on_ray, log=lambda _: None)
    assert a.table_id == b.table_id and a.learned_val_mape == b.learned_val_mape

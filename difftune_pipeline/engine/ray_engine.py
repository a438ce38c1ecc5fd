"""The engine with its simulations fanned out to Ray workers: the same results
as ``Engine`` (each worker runs the same engine on the same pairs), on every
core of this machine or of a cluster.

Each worker is a Ray actor holding an engine per CPU model, its compiled tables
(the engine's cache) and the blocks it was sent, decoded once; one pool of
workers serves the engines of every µarch in a process. A native block
cannot leave its process, so blocks travel as their ``source`` (hex or
assembly text) through Ray's object store, once per block list; tables travel
as the rows that differ from LLVM's (all a worker's engine compiles), not the
thousands of rows of a full table. A worker that dies is restarted by Ray and its task retried, so a
killed worker loses no pairs; a task that kills its worker every time fails
the call after ``RETRIES`` tries rather than looping.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np

from difftune_pipeline.engine import Block, Engine, ParamTable, SimResult

MIN_CHUNK = 64  # pairs per task at least: a task costs about a millisecond of Ray's time
SHIPPED_LISTS = 4  # block lists kept in the object store (a search reuses one for thousands of calls)
PROBE_SECONDS = 5.0  # a cluster's address must answer this fast
IN_FLIGHT = 2  # chunks queued per worker: one running, one waiting
RETRIES = 3  # restarts of a worker, and retries of its task, before a call fails


def probe(address: str, seconds: float = PROBE_SECONDS) -> None:
    """A cluster at ``address`` (``host:port`` or ``ray://host:port``) must answer
    within ``seconds``: Ray itself would wait for it until killed. No address
    (or ``auto``/``local``) means Ray on this machine, started when needed."""
    if address in ("", "auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ConnectionError(f"RAY_ADDRESS={address!r}: a Ray cluster's HOST:PORT (e.g. 10.0.0.5:6379), or unset")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as exc:
        raise ConnectionError(
            f"RAY_ADDRESS={address!r}: no Ray cluster answered within {seconds:g} s "
            f"({exc.strerror or type(exc).__name__}); start one there or unset RAY_ADDRESS"
        ) from None


def connect(address: str | None = None) -> None:
    """Attach to Ray once per process: ``address`` (or ``RAY_ADDRESS``) names a
    running cluster; without one, Ray starts on this machine's CPUs."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    probe(address or "")
    ray.init(
        address=address,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )


@functools.cache
def _worker_class():
    """The actor class, defined (and registered with Ray) once per process."""
    import ray

    @ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)
    class SimulationWorker:
        """Engines in a Ray worker process, one per CPU model; blocks decoded once per list."""

        def __init__(self):
            self.engines: dict[str, Engine] = {}
            self.blocks: OrderedDict[tuple[str, str], list[Block]] = OrderedDict()

        def where(self) -> tuple[str, int]:
            """(Ray node id, process id) of this worker."""
            return ray.get_runtime_context().get_node_id(), os.getpid()

        def simulate(self, mcpu, key, shipped, tables, block_idx, table_idx, iterations, cycle_cap, fast_forward):
            engine = self.engines.get(mcpu) or self.engines.setdefault(mcpu, Engine(mcpu))
            if (mcpu, key) not in self.blocks:
                self.blocks[mcpu, key] = [
                    engine.rebuild(source).with_accesses(accesses, exact, one_page)
                    if accesses
                    else engine.rebuild(source)
                    for source, accesses, exact, one_page in ray.get(shipped[0])
                ]
                if len(self.blocks) > SHIPPED_LISTS:
                    self.blocks.popitem(last=False)
            self.blocks.move_to_end((mcpu, key))
            result = engine.simulate_pairs(
                self.blocks[mcpu, key],
                tables,
                block_idx,
                table_idx,
                iterations=iterations,
                threads=1,
                cycle_cap=cycle_cap,
                fast_forward=fast_forward,
            )
            return result

        def simulate_chunk(
            self, mcpu, key, shipped, table, block_idx, iterations, cycle_cap, fast_forward, write, payload
        ):
            """One chunk under one table, handed to ``write`` here, in the worker."""
            result = self.simulate(
                mcpu, key, shipped, [table], block_idx, np.zeros(len(block_idx), dtype=np.int64),
                iterations, cycle_cap, fast_forward,
            )  # fmt: skip
            return write(payload, result)

    return SimulationWorker


class WorkerPool:
    """``workers`` Ray actors (0: one per CPU free in the cluster now), each holding
    one CPU for as long as the pool lives (the process, or until ``close``)."""

    def __init__(self, workers: int = 0, address: str | None = None):
        import ray

        if workers < 0:
            raise ValueError(f"workers = {workers}: 0 (one per free CPU) or more")
        connect(address)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if workers > cpus:  # actors beyond the cluster's CPUs are never placed: their tasks would wait forever
            raise ValueError(f"{workers} workers need {workers} CPUs; the Ray cluster has {cpus}")
        n = workers or max(1, int(ray.available_resources().get("CPU", 1)))
        worker = _worker_class()
        self.workers = [worker.remote() for _ in range(n)]
        self.tasks = 0  # tasks submitted, for the benchmarks

    def __len__(self) -> int:
        return len(self.workers)

    def live(self) -> list:
        """The workers; a closed pool refuses work."""
        if not self.workers:
            raise RuntimeError("the Ray worker pool is closed")
        return self.workers

    def where(self) -> list[tuple[str, int]]:
        """(node id, process id) of each worker."""
        import ray

        return ray.get([w.where.remote() for w in self.workers])

    def pids(self) -> list[int]:
        return [pid for _, pid in self.where()]

    def close(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers = []


class RayEngine(Engine):
    """``Engine`` whose ``simulate``/``simulate_pairs`` run on a pool of Ray
    workers; everything else (decoding, tables, traces) runs in this process.
    A block list is shipped once while the same list object is passed (a list
    changed in place is not noticed: pass a new list)."""

    def __init__(self, mcpu: str, pool: WorkerPool | Callable[[], WorkerPool]):
        super().__init__(mcpu)
        self._pool = pool
        self._shipped: OrderedDict[int, tuple[list, str, object]] = OrderedDict()

    @property
    def pool(self) -> WorkerPool:
        """The workers; given as a callable, made (and Ray connected) on first use,
        so a run with nothing to simulate never reaches the cluster."""
        if not isinstance(self._pool, WorkerPool):
            self._pool = self._pool()
        return self._pool

    @property
    def parallelism(self) -> int:
        return len(self.pool)

    def _ship(self, blocks: list[Block]) -> tuple[str, object]:
        """(content key, object ref) of a block list's sources, put once while
        the same list object is in use (it is held here, so its id stays its own)."""
        import ray

        hit = self._shipped.get(id(blocks))
        if hit is not None and hit[0] is blocks:
            self._shipped.move_to_end(id(blocks))
            return hit[1], hit[2]
        sources = [(b.source, b.accesses, b.exact_accesses, b.one_page_accesses) for b in blocks]  # their addresses too
        key = hashlib.sha256(json.dumps(sources).encode()).hexdigest()
        ref = ray.put(sources)
        self._shipped[id(blocks)] = (blocks, key, ref)
        if len(self._shipped) > SHIPPED_LISTS:
            self._shipped.popitem(last=False)
        return key, ref

    def _sparse(self, table: ParamTable | None) -> ParamTable | None:
        """``table`` as its globals and the rows that differ from LLVM's: compiled the same."""
        if table is None:
            return None
        return ParamTable(
            table.mcpu,
            table.llvm_version,
            dict(table.globals),
            table.changed_rows(self._base()),
            table.mechanisms,
            table.harness,
        )

    def _pairs(self, blocks, tables, block_idx, table_idx, iterations, threads, cycle_cap, fast_forward) -> SimResult:
        """``simulate_pairs`` split into tasks over the workers (``threads`` is the
        workers' business: each runs one)."""
        import ray

        n = len(block_idx)
        if n == 0:
            return SimResult(np.zeros(0, dtype=np.int64), [], np.zeros(0))
        key, ref = self._ship(list(blocks) if not isinstance(blocks, list) else blocks)
        tables_ref = ray.put([self._sparse(t) for t in tables])
        workers = self.pool.live()
        tasks = max(1, min(len(workers) * 2, math.ceil(n / MIN_CHUNK)))
        bounds = np.linspace(0, n, tasks + 1).astype(int)
        futures = [
            workers[i % len(workers)].simulate.remote(
                self.mcpu, key, [ref], tables_ref, block_idx[a:b], table_idx[a:b], iterations, cycle_cap, fast_forward
            )
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))
        ]
        self.pool.tasks += len(futures)
        parts = ray.get(futures)
        return SimResult(
            np.concatenate([p.cycles for p in parts]),
            [s for p in parts for s in p.status],
            np.concatenate([p.steady for p in parts]),
        )

    def _chunks(self, blocks, chunks, write, iterations, cycle_cap, fast_forward) -> Iterator:
        """``simulate_chunks``, each chunk a task of the least busy worker, which calls
        ``write`` itself (a Parquet file written where it was computed); ``IN_FLIGHT``
        chunks per worker at most, so the chunks are read lazily. A table is put in the
        object store once for its consecutive chunks."""
        import ray

        workers, busy, running = [], {}, {}  # running: future -> worker index
        table_ref = (None, None)

        def finished(wait_for: int):
            done, _ = ray.wait(list(running), num_returns=wait_for)
            for future in done:
                busy[running.pop(future)] -= 1
            return ray.get(done)

        for table, block_idx, payload in chunks:
            if not workers:  # the first chunk: only now the cluster is reached and the blocks shipped
                key, ref = self._ship(blocks)
                workers = self.pool.live()
                busy = dict.fromkeys(range(len(workers)), 0)
            if table_ref[0] is not table:
                table_ref = (table, ray.put(self._sparse(table)))
            w = min(busy, key=busy.get)
            future = workers[w].simulate_chunk.remote(
                self.mcpu, key, [ref], table_ref[1], np.asarray(block_idx, dtype=np.int64),
                iterations, cycle_cap, fast_forward, write, payload,
            )  # fmt: skip
            running[future] = w
            busy[w] += 1
            self.pool.tasks += 1
            if len(running) >= IN_FLIGHT * len(workers):
                yield from finished(1)
        while running:
            yield from finished(1)

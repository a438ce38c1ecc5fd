"""Simulated pairs as Parquet files, one per chunk, written by whoever simulated
the chunk (a Ray worker, or this process) under a dataset folder: a local path,
or a URI that pyarrow's filesystems open (``s3://…``, ``gs://…``, ``hdfs://…``).

A chunk's file is named by its key, a fingerprint of what it simulated, so a
chunk simulated again (a retried task, a resumed run) replaces its file and
never adds a second one. It is written under a hidden temporary name and then
renamed, so no reader ever sees half a file. The warehouse records each chunk
(key, file, rows, checksum) in ``simulation_chunks``; only recorded files are
read, through ``simulations``, a view each reading connection gets over them.

A file is checked against its record: cheaply on every read (its size, and its
footer's row count), in full before anything learns from it (the SHA-256 of its
bytes), and its pages carry Parquet's own checksums, which every scan verifies.
A file that fails is damaged: its chunk is forgotten and simulated again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from difftune_pipeline.engine import SimResult

SCHEMA = pa.schema(
    [
        ("block_id", pa.string()),
        ("table_id", pa.string()),
        ("mcpu", pa.string()),
        ("llvm_version", pa.string()),
        ("iterations", pa.int32()),
        ("cycles", pa.int64()),  # the engine's Total Cycles; null when status is not ok
        ("steady_cycles_per_100", pa.float64()),  # cycles per 100 iterations in steady state; null likewise
        ("status", pa.string()),
        ("shard", pa.string()),
    ]
)
# The columns of a chunk's record in ``simulation_chunks`` (less recorded_at).
CHUNK_COLUMNS = ("chunk_key", "mcpu", "table_id", "iterations", "shard", "file", "rows", "failed", "bytes", "sha256")
TUNING = "tuning"  # the shard of the tables the tuning visited (steps.tuning_records); the others are shard-N
TEMPORARY = ".tmp"  # suffix of a file being written (hidden: its name starts with a dot)


def default_root(db: str | Path) -> str:
    """The dataset folder when none is set: ``simulations/`` beside the warehouse file."""
    return str(Path(db).resolve().parent / "simulations")


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) of a local folder or a URI (a remote filesystem
    is made once per process: making one may ask the network, e.g. for a bucket's region)."""
    if "://" not in root:
        return pafs.LocalFileSystem(), str(Path(root).resolve())
    parts = urllib.parse.urlsplit(root)
    fs = _remote(f"{parts.scheme}://{parts.netloc}")
    if fs.type_name in ("s3", "gcs"):  # a bucket's objects are named with the bucket
        return fs, posixpath.join(parts.netloc, parts.path.lstrip("/"))
    return fs, parts.path.lstrip("/") if fs.type_name == "mock" else parts.path


@functools.lru_cache(maxsize=64)
def _remote(uri: str) -> pafs.FileSystem:
    """The filesystem of a bucket or host, made once per process."""
    return pafs.FileSystem.from_uri(uri)[0]


def chunk_key(mcpu: str, llvm_version: str, iterations: int, table_id: str, block_ids: list[str]) -> str:
    """What a chunk simulated, as its file's name."""
    text = json.dumps([mcpu, llvm_version, iterations, table_id, block_ids])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Chunk:
    """Pairs of one sampled table: its blocks, in the order they were simulated."""

    key: str
    table_id: str
    block_ids: list[str]


@dataclass(frozen=True)
class ChunkWriter:
    """Writes a simulated chunk as ``<root>/<mcpu>/<shard>/<key>.parquet`` and
    returns its record for ``simulation_chunks``. Picklable: it travels to the
    Ray worker that simulates the chunk, which writes the file itself. ``db``
    is the warehouse file: a file under its folder is recorded relative to it."""

    root: str
    db: str
    mcpu: str
    llvm_version: str
    iterations: int
    shard: str

    def __call__(self, chunk: Chunk, result: SimResult) -> dict:
        ok = result.ok
        frame = pa.table(
            {
                "block_id": chunk.block_ids,
                "table_id": [chunk.table_id] * len(chunk.block_ids),
                "mcpu": [self.mcpu] * len(ok),
                "llvm_version": [self.llvm_version] * len(ok),
                "iterations": [self.iterations] * len(ok),
                "cycles": pa.array(result.cycles, mask=~ok),
                "steady_cycles_per_100": pa.array(result.steady, mask=~ok),
                "status": list(result.status),
                "shard": [self.shard] * len(ok),
            },
            schema=SCHEMA,
        )
        return self.write(chunk.key, chunk.table_id, frame)

    def write(self, key: str, table_id: str, frame: pa.Table) -> dict:
        """``frame`` (rows of ``SCHEMA``) as the file of chunk ``key``: encoded in
        memory, written under a temporary name, then renamed into place."""
        encoded = pa.BufferOutputStream()
        pq.write_table(frame, encoded, write_page_checksum=True)
        data = encoded.getvalue()
        fs, base = filesystem(self.root)
        folder = posixpath.join(base, self.mcpu, self.shard)
        fs.create_dir(folder, recursive=True)
        final = posixpath.join(folder, f"{key}.parquet")
        temporary = posixpath.join(folder, f".{key}.{uuid.uuid4().hex}{TEMPORARY}")
        with fs.open_output_stream(temporary) as out:
            out.write(data)
        fs.move(temporary, final)
        return {
            "chunk_key": key,
            "mcpu": self.mcpu,
            "table_id": table_id,
            "iterations": self.iterations,
            "shard": self.shard,
            "file": self._location(final),
            "rows": frame.num_rows,
            "failed": frame.num_rows - (pc.sum(pc.equal(frame["status"], "ok")).as_py() or 0),
            "bytes": data.size,
            "sha256": hashlib.sha256(data).hexdigest(),
        }

    def _location(self, path: str) -> str:
        """How the file is recorded: relative to the warehouse's folder when it lies under it
        (the two move together), else the full URI or path."""
        if "://" in self.root:
            return self.root.rstrip("/") + "/" + posixpath.relpath(path, filesystem(self.root)[1] or ".")
        folder = Path(self.db).resolve().parent
        try:
            return str(Path(path).relative_to(folder))
        except ValueError:
            return path

    def remove_stale(self, before: float) -> int:
        """Temporary files of this shard older than ``before`` (a writer killed
        mid-file left them; no live writer is that old): removed, returns how many."""
        fs, base = filesystem(self.root)
        folder = posixpath.join(base, self.mcpu, self.shard)
        removed = 0
        for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            stale = info.mtime is not None and info.mtime.timestamp() < before
            if info.base_name.endswith(TEMPORARY) and stale:
                fs.delete_file(info.path)
                removed += 1
        return removed


def resolve(db: str | Path, file: str) -> str:
    """A recorded file's location: a URI as it is, a relative path under the warehouse's folder."""
    if "://" in file or Path(file).is_absolute():
        return file
    return str(Path(db).resolve().parent / file)


def sizes(db: str | Path, files: list[str]) -> list[int | None]:
    """Each recorded file's size in bytes now, None where it is gone."""
    out = []
    for file in files:
        fs, path = filesystem(resolve(db, file))
        info = fs.get_file_info(path)
        out.append(info.size if info.type == pafs.FileType.File else None)
    return out


GONE = "the file is gone"


class DamagedChunks(OSError):
    """Recorded chunk files that are gone or not what was written; the message names one and why."""

    def __init__(self, db: str | Path, damaged: list[tuple[str, str]]):
        self.files = [file for file, _ in damaged]
        file, why = damaged[0]
        gone = all(w == GONE for _, w in damaged)
        super().__init__(
            f"{len(damaged)} recorded simulation chunk file(s) are {'gone' if gone else 'damaged or gone'}, e.g. "
            f"{resolve(db, file)}: {why}; `difftune verify` forgets them and the next `difftune materialize` "
            f"simulates the sampled tables' again (a chunk of the shard {TUNING!r}, the tuning's record, is not)"
            + (" (or move the warehouse's folder together with its simulations/)" if gone else "")
        )


# Local files whose size and footer matched their record, by (location, size, mtime): a read
# checks a file again only once it changed (a chunk's file is never rewritten in place).
_FOOTERS_OK: set[tuple[str, int, int]] = set()


def damage(db: str | Path, records: list[tuple[str, int, int, str]], full: bool) -> list[tuple[str, str]]:
    """(file, why) of each recorded (file, bytes, rows, sha256) whose file is gone, is
    not the size recorded, has a footer that does not read or counts other rows, or,
    with ``full``, whose bytes do not hash to the SHA-256 recorded. Without ``full``,
    files behind a URI are not asked (a request each)."""
    out = []
    for file, size, rows, sha256 in records:
        location = resolve(db, file)
        if "://" in location and not full:
            continue
        why = _damage(location, size, rows, sha256 if full else None)
        if why:
            out.append((file, why))
    return out


def _damage(location: str, size: int, rows: int, sha256: str | None) -> str | None:
    fs, path = filesystem(location)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        return GONE
    if info.size != size:
        return f"{info.size} bytes, {size} recorded"
    local = "://" not in location
    seen = (location, info.size, info.mtime_ns or 0)
    if sha256 is None and local and seen in _FOOTERS_OK:
        return None
    try:
        with fs.open_input_file(path) as fh:
            footer_rows = pq.read_metadata(fh).num_rows
            if footer_rows != rows:
                return f"its footer counts {footer_rows} rows, {rows} recorded"
            if sha256 is not None:
                fh.seek(0)
                digest = hashlib.sha256()
                while block := fh.read(1 << 20):
                    digest.update(block)
                if digest.hexdigest() != sha256:
                    return "its bytes are not those written (their SHA-256 is not the one recorded)"
    except (OSError, pa.ArrowException) as exc:
        return f"its footer does not read ({str(exc).splitlines()[0]})"
    if local:
        _FOOTERS_OK.add(seen)
    return None


def check(db: str | Path, records: list[tuple[str, int, int, str]]) -> None:
    """The cheap check of every read: ``DamagedChunks`` naming the files that fail it."""
    damaged = damage(db, records, full=False)
    if damaged:
        raise DamagedChunks(db, damaged)


def dataset(db: str | Path, files: list[str]) -> ds.Dataset:
    """The recorded ``files`` as one dataset, scanned lazily (a file is opened
    only when a scan reaches it)."""
    by_fs: dict[str, tuple[pafs.FileSystem, list[str]]] = {}
    for file in files:
        location = resolve(db, file)
        if "://" in location:
            fs, path = filesystem(location)
            parts = urllib.parse.urlsplit(location)
            by_fs.setdefault(f"{parts.scheme}://{parts.netloc}", (fs, []))[1].append(path)
        else:
            by_fs.setdefault("local", (pafs.LocalFileSystem(), []))[1].append(location)
    fmt = ds.ParquetFileFormat(  # a page whose checksum fails is an error, never wrong numbers
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
    )
    parts = [ds.FileSystemDataset.from_paths(paths, SCHEMA, fmt, fs) for fs, paths in by_fs.values()]
    if not parts:
        return ds.FileSystemDataset.from_paths([], SCHEMA, fmt, pafs.LocalFileSystem())
    return parts[0] if len(parts) == 1 else ds.UnionDataset(SCHEMA, parts)


def register(con: duckdb.DuckDBPyConnection, db: str | Path, files: list[str]) -> None:
    """``simulations`` on ``con``: the rows of the recorded ``files``."""
    con.register("simulations", dataset(db, files))

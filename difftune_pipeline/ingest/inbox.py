"""The measurement inbox: a folder where new BHive-format batches are dropped.

Layout: ``<inbox>/<mcpu>/<name>.csv`` (``hex,cycles per 100 iterations``), or
``<name>.per_iteration.csv`` for files in cycles per iteration. A file is one
batch, keyed by its µarch and the hash of its bytes, so a file seen twice (or
copied under another name) maps to the same key and is ingested once. A file
is ready only when it has not changed for ``settle_seconds``; hidden files and
``*.part``/``*.tmp`` (the usual names while a copy is in flight) are never ready.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from difftune_pipeline.engine import CPUS, LLVM_VERSION
from difftune_pipeline.ingest.batches import batch_scope, file_batch_id

IN_FLIGHT_SUFFIXES = (".part", ".tmp", ".partial", ".crdownload")


@dataclass(frozen=True)
class InboxFile:
    path: Path
    uarch: str
    unit: str

    @property
    def partition_key(self) -> str:
        """``<mcpu>-<batch id>``: the same bytes give the same key under any name."""
        return f"{self.uarch}-{file_batch_id(self.path, batch_scope('measurements', self.uarch, unit=self.unit))}"


def unit_of(path: Path) -> str:
    return "cycles_per_iteration" if path.name.endswith(".per_iteration.csv") else "cycles_per_100"


def scan(inbox: Path, settle_seconds: float = 10.0, now: float | None = None) -> tuple[list[InboxFile], list[str]]:
    """Ready files, and a line for each file that is not (yet) ingestible and why."""
    inbox = Path(inbox)
    now = time.time() if now is None else now
    ready, waiting = [], []
    if not inbox.is_dir():
        return ready, [f"{inbox} does not exist yet"]
    for path in sorted(p for p in inbox.rglob("*") if p.is_file()):
        rel = path.relative_to(inbox)
        if any(part.startswith(".") for part in rel.parts) or path.name.endswith(IN_FLIGHT_SUFFIXES):
            waiting.append(f"{rel}: still being written (temporary name)")
        elif len(rel.parts) != 2:
            waiting.append(f"{rel}: not under <inbox>/<mcpu>/, so its µarch is unknown")
        elif rel.parts[0] not in CPUS:
            waiting.append(f"{rel}: {rel.parts[0]!r} is not a CPU LLVM {LLVM_VERSION} models (e.g. haswell, skylake)")
        elif path.suffix != ".csv":
            waiting.append(f"{rel}: not a .csv file")
        elif now - path.stat().st_mtime < settle_seconds:
            waiting.append(f"{rel}: changed less than {settle_seconds:g} s ago, waiting for it to settle")
        else:
            ready.append(InboxFile(path, rel.parts[0], unit_of(path)))
    return ready, waiting


def find(inbox: Path, partition_key: str) -> InboxFile | None:
    """The file of a partition key, if it is still in the inbox."""
    uarch = partition_key.rsplit("-", 1)[0]
    folder = Path(inbox) / uarch
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.csv")):
        candidate = InboxFile(path, uarch, unit_of(path))
        if candidate.partition_key == partition_key:
            return candidate
    return None

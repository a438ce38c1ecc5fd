"""The simulated dataset: sampled tables named by (preset, seed), which blocks
each is simulated on, which shard simulates it, and the simulated pairs as
a surrogate reads them: split and ordered in files, streamed in batches.

Sampled tables are regenerated from ``(preset, seed)`` over a parameter space,
as DiffTune did, so millions of samples stay small.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.warehouse.simulations import PAIR


@dataclass(frozen=True)
class SampledTable:
    table_id: str
    preset: str
    seed: int


def sampled_tables(space: ParamSpace, mcpu: str, presets, per_preset: int) -> list[SampledTable]:
    return [
        SampledTable(f"{preset}-{seed}-{mcpu}-{space.fingerprint()}", preset, seed)
        for preset in presets
        for seed in range(per_preset)
    ]


def shard_of(table_id: str, shards: int) -> int:
    return int(hashlib.sha256(table_id.encode()).hexdigest()[:8], 16) % shards


def planned_blocks(table: SampledTable, block_ids: list[str], per_table: int) -> list[str]:
    """The blocks simulated under ``table``: all, or a fixed random subset."""
    ordered = sorted(block_ids)
    if per_table <= 0 or per_table >= len(ordered):
        return ordered
    rng = np.random.default_rng([table.seed, int(hashlib.sha256(table.table_id.encode()).hexdigest()[:8], 16)])
    return sorted(rng.choice(ordered, size=per_table, replace=False).tolist())


@dataclass
class PairBatch:
    """Pairs read from a ``PairFile``: what one training step or forward pass sees."""

    block_idx: torch.Tensor  # [B] positions in ``Pairs.block_ids``
    table_idx: torch.Tensor  # [B] positions in ``Pairs.tables``
    cycles: torch.Tensor  # [B] the engine's


class PairFile:
    """Pairs as ``PAIR`` records in a file, read by ranges with ``pread``: nothing is
    mapped or cached here, so memory holds the batch being read and nothing more,
    however many pairs the file holds."""

    def __init__(self, path: Path, n: int):
        self.path, self.n = Path(path), n
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return self.n

    def close(self) -> None:
        os.close(self._fd)

    def records(self, ranges: list[tuple[int, int]]) -> np.ndarray:
        """The records of ``(start, count)`` ranges, in that order."""
        size = PAIR.itemsize
        parts = [np.frombuffer(os.pread(self._fd, count * size, start * size), dtype=PAIR) for start, count in ranges]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=PAIR)

    def read(self, ranges: list[tuple[int, int]]) -> PairBatch:
        r = self.records(ranges)
        return PairBatch(
            torch.from_numpy(r["block"].astype(np.int64)),
            torch.from_numpy(r["table"].astype(np.int64)),
            torch.from_numpy(r["cycles"].copy()),
        )

    def pieces(self, size: int) -> Iterator[PairBatch]:
        """The file in order, ``size`` pairs at a time."""
        for start in range(0, self.n, size):
            yield self.read([(start, min(size, self.n - start))])

    def block_counts(self, n_blocks: int, size: int = 1 << 20) -> np.ndarray:
        """Pairs per block position, counted a piece at a time."""
        counts = np.zeros(n_blocks, dtype=np.int64)
        for start in range(0, self.n, size):
            counts += np.bincount(self.records([(start, min(size, self.n - start))])["block"], minlength=n_blocks)
        return counts


@dataclass(frozen=True)
class Split:
    """The pairs split by block into the trained-on and the held-out, each a file;
    ``train_median``: the median cycles of the trained-on (the lower middle one)."""

    train: PairFile
    held: PairFile
    train_median: float


# (held-out per block position, sort key per block position, folder) -> the split pairs:
# trained-on ordered by (key, block, table id), held-out by (block, table id).
SplitPairs = Callable[[np.ndarray, np.ndarray, Path], Split]


@dataclass
class Pairs:
    """Simulated (block, sampled table) pairs, what a surrogate trains on: the blocks
    and tables they index, and how to write them, split and ordered, to files it
    streams from (``split``), so memory does not grow with their number."""

    block_ids: list[str]  # the blocks with at least one pair, in block_idx order (sorted)
    tables: torch.Tensor  # [T, rows + 1, P] raw parameter values; the last row is zeros (no row)
    globals_: torch.Tensor  # [T, 2]
    n: int  # pairs
    split: SplitPairs


def training_pairs(
    counts: dict[str, int],
    split: Callable[[list[str], np.ndarray, np.ndarray, Path], Split],
    space: ParamSpace,
    default: ParamTable,
    tables: list[SampledTable],
    block_ids: list[str],
) -> Pairs:
    """The simulated pairs of ``tables`` over ``block_ids``: ``counts`` holds each
    block's number of pairs, ``split(blocks, held, key, folder)`` writes them to
    files (``steps.surrogate``, through the warehouse's ``simulations.write_pairs``)."""
    wanted = set(block_ids)
    present = sorted(b for b, n in counts.items() if n and b in wanted)
    matrices = torch.zeros((len(tables), len(space.keys) + 1, space.width))  # filled in place: no second copy
    globals_ = torch.zeros((len(tables), len(space.globals)))
    for i, s in enumerate(tables):
        m, g = space.encode(space.sampled_table(s.preset, s.seed, default))
        matrices[i, :-1], globals_[i] = torch.from_numpy(m), torch.from_numpy(g)
    return Pairs(
        block_ids=present,
        tables=matrices,
        globals_=globals_,
        n=sum(counts[b] for b in present),
        split=lambda held, key, folder: split(present, held, key, folder),
    )

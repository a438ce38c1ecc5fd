"""What each step returns: the contract between a step and whoever calls it (an
asset, a test, a script). Figures are plain values; ``data_version`` is what the
step's asset reports, so that only a change of it re-runs what follows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl


@dataclass(frozen=True)
class AccessesRecorded:
    harness: str
    blocks: int  # measured blocks of the µarch
    new: int  # emulated in this run
    recorded: int
    emulated: int  # ran under the harness model (the others fell back to symbolic addresses)
    fallbacks: dict[str, int]  # reason -> blocks
    ms_per_block: float


@dataclass(frozen=True)
class DefaultTable:
    table_id: str
    model: str
    model_chosen_by: str
    rows: int
    new: bool  # stored by this run
    measured: int  # usable measurements of the µarch
    data_version: str


@dataclass(frozen=True)
class FeaturesComputed:
    table_id: str
    blocks: int
    new: int
    by_bottleneck: pl.DataFrame


@dataclass(frozen=True)
class TablesSampled:
    space_id: str
    rows: int
    columns: int
    tables: int
    new_tables: int
    data_version: str


@dataclass(frozen=True)
class ShardSimulated:
    planned: int
    already_done: int
    simulated: int
    damaged_chunks_redone: int
    tables: int
    stale_files_removed: int
    seconds: float
    pairs_per_second: float
    data_version: str  # the shard's tables over the train blocks


@dataclass(frozen=True)
class SurrogateTrained:
    run_id: str
    mcpu: str
    model: str
    checkpoint: str
    n_train: int
    n_heldout: int
    heldout_mape: float
    heldout_kendall_tau: float | None
    train_seconds: float
    config: str
    created_at: datetime
    device: str | None  # None: reused, not trained in this run
    reused: bool


@dataclass(frozen=True)
class Learned:
    table_id: str
    reused: bool
    default_val_mape: float
    learned_val_mape: float
    history: list[dict] | None = None  # the tuners' steps (None when reused)
    stages: list[dict] | None = None  # per stage: its gain on val and its cost
    seconds: float | None = None
    changed_rows: int | None = None


@dataclass(frozen=True)
class Evaluated:
    tables: dict[str, str]  # llvm-mca, default, learned -> table id
    model: str
    measure: str
    test_worse_share: float | None
    by_measure: pl.DataFrame
    comparison: pl.DataFrame
    changed: pl.DataFrame
    figures_reused: bool
    scatter: tuple[bytes, object] | None
    explained: list[dict]

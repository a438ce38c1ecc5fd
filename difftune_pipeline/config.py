"""How much to sample, simulate, train and search: one settings type, and the
profiles as data — each a few overrides of one base.

Overrides name a field by its dotted path (``"search.budget": 3000``); the
Dagster resource, the command line and the benchmarks all build their settings
through ``settings_for``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from difftune_pipeline.engine import check_measure, extended
from difftune_pipeline.model.params import PRESETS
from difftune_pipeline.surrogates import surrogate_type
from difftune_pipeline.surrogates.lstm import LSTMConfig
from difftune_pipeline.surrogates.structured import StructuredConfig
from difftune_pipeline.tuners import compose
from difftune_pipeline.tuners.gradient import TuneConfig
from difftune_pipeline.tuners.pruning import PruneConfig
from difftune_pipeline.tuners.search import SearchConfig


@dataclass(frozen=True)
class Settings:
    presets: tuple[str, ...] = ("perturb", "difftune")  # sampling presets (model/params.py)
    tables_per_preset: int = 24
    blocks_per_table: int = 0  # 0: every train block
    shards: int = 4  # simulation partitions
    iterations: int = 100
    # What a table predicts and is tuned and judged on (engine.SimResult.predicted):
    # steady (what BHive measures: the cycles per 100 iterations once fill and drain
    # cancel) or total (llvm-mca's Total Cycles at `iterations`)
    measure: str = "steady"
    surrogate_model: str = "structured"  # structured | ithemal (DiffTune's LSTM)
    lstm: LSTMConfig = field(default_factory=LSTMConfig)
    structured: StructuredConfig = field(default_factory=StructuredConfig)
    tuner: str = "ranked"  # surrogate | direct | combined | ranked | combined+direct (tuners/__init__.py)
    tune: TuneConfig = field(default_factory=TuneConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)  # the tuners' last stage (tuners/pruning.py)
    max_surrogate_heldout_mape: float = 0.25  # the surrogate's fidelity check fails above this
    # The simulator: llvm-mca's model, the extended one (engine/extended.py), some of
    # its mechanisms (llvm-mca+front_end+…), or auto: the one whose default table
    # scores better on val. The harness model the measurements were taken under
    # gives the memory mechanism its addresses: auto is each µarch's own (BHive's
    # files: bhive; AnICA's Zen+ set: nanobench), or one of extended.HARNESSES.
    model: str = "auto"
    harness: str = "auto"

    @property
    def surrogate_config(self):
        """The configuration of the chosen surrogate model."""
        return getattr(self, surrogate_type(self.surrogate_model).settings_field)


PROFILES: dict[str, dict[str, Any]] = {
    "sample": {},  # the base, on the bundled sample
    # the whole graph in about a minute: a check, not a result
    "smoke": {
        "tables_per_preset": 2,
        "blocks_per_table": 200,
        "lstm.epochs": 1,
        "structured.epochs": 3,
        "tune.steps": 10,
        "search.budget": 3000,
        "search.rounds": 1,
        "max_surrogate_heldout_mape": 1.0,
    },
    # BHive's files: DiffTune's dataset size on 2 cores
    "full": {
        "tables_per_preset": 32,
        "blocks_per_table": 3000,
        "lstm.epochs": 12,
        "tune.steps": 400,
        # log_scale units a step: Zen+'s 100-cycle placeholders need it (val 4.41% against 17.84%
        # with the sample's 0.02; docs/history.md, "The surrogate's gradient carries learning")
        "tune.lr": 0.05,
        # the gradient's rounds inside half a log_scale unit of the engine's last table: on
        # Haswell's val 7.54% against 8.32% with 1.0 (docs/history.md, "The surrogate's worth")
        "tune.trust": 0.5,
        "search.budget": 192_000,
        # the search may halve a value (the prior, 0.5 everywhere, counts a halving as
        # one unit); it also starts again from LLVM's table (docs/model.md: "A prior toward LLVM's values")
        "search.halving": True,
        # rows in too few train blocks searched with their siblings (Zen+'s string ops)
        "search.siblings": True,
        # the gradient, then the search whose moves the surrogate ranks: on val as good
        # as the direct search from LLVM's table run again four times, or better, with
        # a quarter to a half of its simulations (docs/history.md, "The surrogate's worth")
        "tuner": "ranked",
    },
}


# The least value of a top-level field that a run can work with (the groups check their own).
RANGES = {"tables_per_preset": 1, "blocks_per_table": 0, "shards": 1, "iterations": 1, "max_surrogate_heldout_mape": 0}


def override(settings, changes: dict[str, Any]):
    """``settings`` with dotted fields replaced; a value must have its field's type
    (an int is accepted for a float, a list for a tuple)."""
    nested: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    fields = {f.name: f for f in dataclasses.fields(settings)}
    for name in [*top, *nested]:
        if name not in fields:
            raise ValueError(f"unknown setting {name!r} of {type(settings).__name__}: one of {sorted(fields)}")
    for name, value in top.items():
        current = getattr(settings, name)
        if dataclasses.is_dataclass(current):
            raise ValueError(f"setting {name!r} is a group: set its fields ({name}.<field>)")
        top[name] = _typed(name, value, current)
    for name, changed in nested.items():
        top[name] = override(getattr(settings, name), changed)
    return dataclasses.replace(settings, **top)


def _typed(name: str, value, current):
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(current, tuple):
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    else:
        ok = isinstance(value, type(current)) and not isinstance(value, bool)
    if not ok:
        raise ValueError(f"setting {name!r} must be of type {type(current).__name__}, got {value!r}")
    return value


def settings_for(profile: str, overrides: dict[str, Any] | None = None) -> Settings:
    """A profile's settings, with ``overrides`` on top."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: one of {sorted(PROFILES)}")
    settings = override(override(Settings(), PROFILES[profile]), overrides or {})
    surrogate_type(settings.surrogate_model)  # refuses an unknown name, listing the known ones
    compose(settings.tuner, settings.tune, settings.search, settings.prune)
    extended.parse(settings.model)  # refuses an unknown model or mechanism
    if settings.harness != "auto":
        extended.check((), settings.harness)
    check_measure(settings.measure, "setting 'measure'")
    unknown = [p for p in settings.presets if p not in PRESETS]
    if unknown:
        raise ValueError(f"unknown sampling presets {unknown}: one of {PRESETS}")
    for name, least in RANGES.items():
        if getattr(settings, name) < least:
            raise ValueError(f"setting {name!r} must be at least {least}, got {getattr(settings, name)!r}")
    return settings


def parse_overrides(text: str | None) -> dict[str, Any]:
    """Overrides from JSON text (``DIFFTUNE_SETTINGS``), e.g. ``{"search.budget": 3000}``."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"settings overrides are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("settings overrides must be a JSON object of dotted names to values")
    return value


# ---- where each profile's input data comes from ----------------------------
SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "sample"
# µarch -> (file under ground_truth/, unit). AMD Zen+ (nanoBench, AnICA) is modelled by LLVM's znver1.
FULL_MEASUREMENTS = {
    "haswell": ("bhive_hsw.csv", "cycles_per_100"),
    "ivybridge": ("bhive_ivb.csv", "cycles_per_100"),
    "skylake": ("bhive_skl.csv", "cycles_per_100"),
    "znver1": ("other/anica_nanobench_zenplus_cycles_per_iter.csv", "cycles_per_iteration"),
}


def input_files(profile: str, data_dir: str | None) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(measurement files as (path, µarch, unit), corpus files) of a profile: the
    bundled sample, or BHive's files under ``data_dir`` for ``full``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: one of {sorted(PROFILES)}")
    if profile != "full":
        return (
            [(str(SAMPLE_DIR / "bhive_hsw_sample.csv"), "haswell", "cycles_per_100")],
            sorted(str(p) for p in (SAMPLE_DIR / "corpus").glob("*.csv")),
        )
    if not data_dir:
        raise ValueError(
            "the full profile needs DIFFTUNE_DATA_DIR: a folder with BHive's ground_truth/ and bhive_sources/"
        )
    root = Path(data_dir)
    files = [
        (str(root / "ground_truth" / name), uarch, unit)
        for uarch, (name, unit) in FULL_MEASUREMENTS.items()
        if (root / "ground_truth" / name).exists()
    ]
    if not files:
        raise FileNotFoundError(
            f"{data_dir} holds none of ground_truth/{sorted(name for name, _ in FULL_MEASUREMENTS.values())}"
        )
    return files, sorted(str(p) for p in (root / "bhive_sources").glob("*.csv"))

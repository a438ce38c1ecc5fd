"""How good a prediction is: MAPE, Kendall tau, and the slices results are reported by
(source application, ML kernel family, block length, memory use, bottleneck)."""

from __future__ import annotations

import math
import zlib

import numpy as np
import polars as pl
from scipy.stats import kendalltau

# A block is "worse" under a table whose error exceeds another's by this much (20
# points): the evaluation's share of blocks made worse, and what pruning lets a row do.
WORSE_POINTS = 0.20
# Resamples behind a headline figure's interval (``intervals``): on a thousand test
# blocks its ends move by up to .001 of tau and .06 points of MAPE from one seed to
# another (Haswell, Ivy Bridge and Skylake, seeds 0-2).
BOOTSTRAP_INTERVAL_RESAMPLES = 1000


def mape(predicted, measured) -> float:
    """Mean absolute percentage error, as a fraction (0.25 = 25%)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if p.size == 0:
        return float("nan")
    return float(np.mean(np.abs(p - m) / m))


def signed_error(predicted, measured) -> float:
    """Mean (predicted - measured) / measured: below 0, predicted too fast."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return float(np.mean((p - m) / m)) if p.size else float("nan")


def scored(result, measured, measure: str = "steady") -> tuple[float, float | None]:
    """MAPE and Kendall tau of a simulation's ``measure`` (``engine.SimResult``)
    against ``measured``, over the blocks the engine simulated."""
    predicted, truth = result.predicted(measure)[result.ok], np.asarray(measured, dtype=float)[result.ok]
    return mape(predicted, truth), kendall_tau(predicted, truth)


def helps_where_it_changes(before, after, measured) -> tuple[bool, str]:
    """Whether predictions ``after`` beat ``before`` on the blocks whose prediction
    they change: a lower MAPE there, and more of them closer to the measurement than
    further. A mechanism that changes 2% of the blocks is judged on those, not lost
    in the noise of the others. Returns the verdict and what it rests on."""
    b, a, m = (np.asarray(x, dtype=float) for x in (before, after, measured))
    changed = np.isfinite(b) & np.isfinite(a) & (b != a)
    if not changed.any():
        return False, "changes no block"
    was, now = np.abs(b[changed] - m[changed]) / m[changed], np.abs(a[changed] - m[changed]) / m[changed]
    closer, further = int(np.sum(now < was)), int(np.sum(now > was))
    helps = bool(now.mean() < was.mean() and closer > further)
    return helps, (
        f"{int(changed.sum())} blocks changed, {closer} closer, {further} further, "
        f"MAPE there {100 * was.mean():.1f}% -> {100 * now.mean():.1f}%"
    )


def kendall_tau(predicted, measured) -> float | None:
    """None where the rank correlation is undefined (fewer than two blocks, or all tied)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if p.size < 2:
        return None
    tau = float(kendalltau(p, m).statistic)
    return tau if math.isfinite(tau) else None


def discordant_pairs(predicted, measured, chunk: int = 512) -> np.ndarray:
    """Per block, how many other blocks it is ranked the wrong way round against:
    pairs whose predictions are ordered one way and measurements the other, the
    pairs Kendall's tau counts against a table (ties in either count for neither).
    Rows in chunks, so memory grows with the blocks, not with their pairs."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    out = np.zeros(p.size, dtype=np.int64)
    for start in range(0, p.size, chunk):
        rows = slice(start, start + chunk)
        against = np.sign(p[rows, None] - p[None, :]) * np.sign(m[rows, None] - m[None, :]) < 0
        out[rows] = against.sum(axis=1)
    return out


def intervals(
    predicted: dict[str, np.ndarray],
    measured,
    pairs: tuple[tuple[str, str], ...] = (),
    resamples: int = BOOTSTRAP_INTERVAL_RESAMPLES,
    seed: int = 0,
) -> dict[str, dict[str, tuple[float, float]]]:
    """Bootstrap 95% intervals (blocks resampled) of each named prediction's MAPE and
    Kendall tau against ``measured``, and of each pair's differences ``(a, b)``: a's
    figure less b's, over the same resampled blocks. A test split of a thousand blocks
    measures a tau to about ±.007: a figure .002 from a target says little either way,
    a difference whose interval excludes zero does. A prediction's missing blocks
    (NaN) leave its figures, as the evaluation's; seeded, so the same inputs give the same
    intervals. Keys: each name, and ``"a - b"`` per pair; values: {"mape": (low, high),
    "kendall_tau": (low, high)} (NaN where a resample's tau is undefined throughout)."""
    m = np.asarray(measured, dtype=float)
    arrays = {name: np.asarray(p, dtype=float) for name, p in predicted.items()}
    for name, p in arrays.items():
        if p.shape != m.shape:
            raise ValueError(f"{name}: {p.size} predictions for {m.size} measurements")
    for a, b in pairs:
        if a not in arrays or b not in arrays:
            raise ValueError(f"pair {a!r}, {b!r}: no such prediction")
    draws = {name: {"mape": [], "kendall_tau": []} for name in arrays}
    rng = np.random.default_rng(seed)
    for _ in range(resamples if m.size else 0):
        pick = rng.integers(0, m.size, size=m.size)
        for name, p in arrays.items():
            ok = np.isfinite(p[pick])
            draws[name]["mape"].append(mape(p[pick][ok], m[pick][ok]))
            tau = kendall_tau(p[pick][ok], m[pick][ok])
            draws[name]["kendall_tau"].append(float("nan") if tau is None else tau)
    figures = {name: {k: np.asarray(v) for k, v in d.items()} for name, d in draws.items()}
    figures |= {f"{a} - {b}": {k: figures[a][k] - figures[b][k] for k in figures[a]} for a, b in pairs}

    def interval(values: np.ndarray) -> tuple[float, float]:
        values = values[np.isfinite(values)]
        if not values.size:
            return float("nan"), float("nan")
        return tuple(float(q) for q in np.quantile(values, [0.025, 0.975]))

    return {name: {k: interval(v) for k, v in f.items()} for name, f in figures.items()}


ML_FAMILIES = {"tensorflow": "tensorflow", "eigen": "eigen", "openblas": "openblas"}
LENGTHS = [(1, 4), (5, 9), (10, 19), (20, 10**9)]
# Instruction classes (AT&T mnemonics, one pattern per line of a block's text): a
# block is in every class one of its instructions is in, and in "class:other" when
# in none. Where the error lives is read per class (reporting/anatomy.py).
INSTRUCTION_CLASSES = {
    "divide": r"^\s*i?div[bwlq]?\s",
    "fp_divide_sqrt": r"^\s*v?(div|sqrt|rsqrt|rcp)[sp][sd]\s",
    "x87": (
        r"^\s*f(ld[sltz1]?|ldpi|ldl2[et]|ldlg2|ldln2|ild[sl]{0,2}|i?stp?[slt]?|istp[sl]{0,2}|isttp[slq]{0,2}|"
        r"i?(add|sub|subr|mul|div|divr)[psl]?|i?u?comi?p{0,2}[sl]?|xch|chs|abs|sqrt|sin|cos|sincos|p?tan|patan|"
        r"scale|prem1?|rndint|xam|tst|cmov\w+|yl2x(p1)?|2xm1|xtract|bld|bstp|free|incstp|decstp)(\s|$)"
    ),
    "locked": r"^\s*(lock\b|xchg[bwlq]?\s.*\()",
    "fence_serialising": r"^\s*(mfence|lfence|sfence|cpuid|rdtscp?|pause)\b",
    "string": r"^\s*(rep\w*|movs[bwlq]|stos[bwlq]?|lods[bwlq]?|cmps[bwlq]|scas[bwlq]?)\b",
    "push_pop": r"^\s*(push|pop)[wq]?\s",
    "read_modify_write": r"^\s*(add|sub|and|or|xor|inc|dec|neg|not|adc|sbb|shl|shr|sar|rol|ror)[bwlq]?\s.*\)\s*$",
    "simd": r"%[xyz]mm",
}


def slices(
    blocks: pl.DataFrame,
    sources: pl.DataFrame,
    bottlenecks: pl.DataFrame | None = None,
    extra: list[pl.DataFrame] = (),
) -> pl.DataFrame:
    """(block_id, slice) memberships: all, source application, ML kernel family,
    block length, instruction class, memory vs register-only, the bottleneck the block's hardware
    features point to, and ``extra`` (block_id, slice) frames. ``blocks`` has
    block_id, n_insts, asm; ``sources`` has block_id, app; ``bottlenecks``
    block_id, bottleneck."""
    parts = [blocks.select("block_id", pl.lit("all").alias("slice"))]
    parts += [e.join(blocks.select("block_id"), on="block_id").select("block_id", "slice") for e in extra]
    if not sources.is_empty():
        parts.append(sources.select("block_id", (pl.lit("app:") + pl.col("app")).alias("slice")))
        family = pl.lit(None, dtype=pl.Utf8)
        for prefix, name in ML_FAMILIES.items():
            family = pl.when(pl.col("app").str.starts_with(prefix)).then(pl.lit(name)).otherwise(family)
        ml = sources.with_columns(family.alias("family")).filter(pl.col("family").is_not_null())
        parts.append(ml.select("block_id", (pl.lit("ml:") + pl.col("family")).alias("slice")))
        parts.append(ml.select("block_id", pl.lit("ml:all").alias("slice")))
        parts.append(
            blocks.join(ml.select("block_id"), on="block_id", how="anti").select(
                "block_id", pl.lit("ml:none").alias("slice")
            )
        )
    for lo, hi in LENGTHS:
        label = f"len:{lo}-{hi}" if hi < 10**9 else f"len:{lo}+"
        parts.append(
            blocks.filter(pl.col("n_insts").is_between(lo, hi)).select("block_id", pl.lit(label).alias("slice"))
        )
    lines = blocks.select("block_id", pl.col("asm").str.split("\n").alias("line")).explode("line")
    classes = pl.concat(
        [
            lines.filter(pl.col("line").str.contains(pattern)).select(
                "block_id", pl.lit(f"class:{name}").alias("slice")
            )
            for name, pattern in INSTRUCTION_CLASSES.items()
        ]
    ).unique()
    parts.append(classes)
    parts.append(
        blocks.join(classes, on="block_id", how="anti").select("block_id", pl.lit("class:other").alias("slice"))
    )
    memory = pl.col("asm").str.contains(r"\(")
    parts.append(
        blocks.select(
            "block_id", pl.when(memory).then(pl.lit("mem:memory")).otherwise(pl.lit("mem:register")).alias("slice")
        )
    )
    if bottlenecks is not None and not bottlenecks.is_empty():
        parts.append(
            bottlenecks.join(blocks.select("block_id"), on="block_id").select(
                "block_id", (pl.lit("bottleneck:") + pl.col("bottleneck")).alias("slice")
            )
        )
    return pl.concat(parts).unique()


def metrics_by_slice(
    pred: pl.DataFrame, truth: pl.DataFrame, splits: pl.DataFrame, memberships: pl.DataFrame
) -> pl.DataFrame:
    """MAPE, Kendall tau and the mean signed relative error per (split, slice). ``pred``: block_id, cycles;
    ``truth``: block_id, cycles_per_100; ``splits``: block_id, split. Each group
    is summed in block order, so the same inputs give the same bits in every process."""
    joined = (
        pred.join(truth, on="block_id")
        .join(splits, on="block_id")
        .join(memberships, on="block_id")
        .filter(pl.col("cycles").is_not_null())
        .sort(["split", "slice", "block_id"])
    )
    rows = []
    for (split, slice_), group in joined.group_by(["split", "slice"], maintain_order=True):
        rows.append(
            {
                "split": split,
                "slice": slice_,
                "n": group.height,
                "mape": mape(group["cycles"], group["cycles_per_100"]),
                "kendall_tau": kendall_tau(group["cycles"], group["cycles_per_100"]),
                "mean_signed_error": signed_error(group["cycles"], group["cycles_per_100"]),
            }
        )
    schema = {"split": pl.Utf8, "slice": pl.Utf8, "n": pl.Int64, "mape": pl.Float64, "kendall_tau": pl.Float64}
    return pl.DataFrame(rows, schema={**schema, "mean_signed_error": pl.Float64}).sort(["split", "slice"])


MIN_SLICE_BLOCKS = 20  # fewer blocks than this never make a slice "worse": a handful of blocks is noise
BOOTSTRAP_RESAMPLES = 2000


def worse_slices(
    errors: pl.DataFrame, memberships: pl.DataFrame, min_blocks: int = MIN_SLICE_BLOCKS, seed: int = 0
) -> pl.DataFrame:
    """Per slice, whether a table is worse than another by more than noise.
    ``errors``: block_id, base_error, new_error (absolute relative errors of one
    block under the two tables). The difference of the slice's MAPEs holds up when
    the slice has ``min_blocks`` blocks and the bootstrap 95% interval of the mean
    per-block difference (blocks resampled) lies above zero. Columns: slice, n,
    difference, low, high, holds (seeded: the same inputs give the same verdicts)."""
    joined = errors.join(memberships, on="block_id").sort(["slice", "block_id"])
    rows = []
    for (slice_,), group in joined.group_by(["slice"], maintain_order=True):
        d = (group["new_error"] - group["base_error"]).to_numpy()
        low = high = float("nan")
        if d.size >= min_blocks:
            rng = np.random.default_rng([seed, zlib.crc32(slice_.encode())])  # a slice's draws are its own
            means = d[rng.integers(0, d.size, size=(BOOTSTRAP_RESAMPLES, d.size))].mean(axis=1)
            low, high = (float(q) for q in np.quantile(means, [0.025, 0.975]))
        rows.append(
            {
                "slice": slice_,
                "n": d.size,
                "difference": float(d.mean()),
                "low": low,
                "high": high,
                "holds": bool(d.size >= min_blocks and low > 0),
            }
        )
    schema = {"slice": pl.Utf8, "n": pl.Int64, "difference": pl.Float64, "low": pl.Float64, "high": pl.Float64}
    return pl.DataFrame(rows, schema={**schema, "holds": pl.Boolean})

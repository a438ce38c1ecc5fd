"""A batch's lines as rows: measurement lines parsed column-wise with polars
where they are plain, the rest one by one, each bad line with its reason."""

from __future__ import annotations

import math
import re

import polars as pl

from difftune_pipeline.ingest.blocks import canonical_hex, hex_problem

# A measured throughput is within these bounds (cycles per 100 iterations): a million
# cycles per iteration is ~800x the slowest BHive block (127,761 per 100 on Haswell);
# one cycle per 100 iterations is ~20x faster than the fastest one-instruction block.
THROUGHPUT_BOUNDS = (1.0, 1e8)


# A plain decimal number in ASCII (float() would also take "1_000" and other scripts' digits).
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def parse_number(
    text: str, what: str, zero_ok: bool = False, bounds: tuple[float, float] = (0.0, math.inf)
) -> tuple[float | None, str | None]:
    """(value, None), or (None, why ``text`` is not a number of ``what`` within ``bounds``)."""
    if NUMBER.fullmatch(text) is None:
        special = text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")
        return None, f"{what} {text!r} is {'not finite' if special else 'not a number'}"
    value = float(text)
    if not math.isfinite(value):
        return None, f"{what} {text!r} is not finite"
    if value < 0 or (value == 0 and not zero_ok):
        return None, f"{what} must be {'non-negative' if zero_ok else 'positive'}, got {text!r}"
    least, most = bounds
    if value > most or 0 < value < least:
        return None, f"{what} {text!r} is outside {least:g}..{most:g}: not a basic block's throughput"
    return value, None


def split_rows(lines, what: str, zero_ok: bool, first_seen: dict | None, bounds: tuple[float, float] = (0.0, math.inf)):
    """(line_no, raw, hex, value) of well-formed rows, and (line_no, raw, reason) of
    the rest. ``first_seen`` (hex -> (line, value), kept across a file's chunks):
    a block listed again is a duplicate; None: a repeated measurement (kept; the
    tuning uses the mean)."""
    good, bad = [], []
    for line_no, raw in lines:
        fields = raw.split(",")
        if len(fields) != 2:
            bad.append((line_no, raw, f"expected 2 comma-separated fields 'hex,{what}', got {len(fields)}"))
            continue
        hex_ = canonical_hex(fields[0])
        problem = hex_problem(hex_)
        if problem:
            bad.append((line_no, raw, problem))
            continue
        value, problem = parse_number(fields[1].strip(), what, zero_ok, bounds)
        if problem:
            bad.append((line_no, raw, problem))
            continue
        if first_seen is not None:
            if hex_ in first_seen:
                prev_line, prev_value = first_seen[hex_]
                reason = (
                    f"duplicate of line {prev_line}"
                    if value == prev_value
                    else f"conflicts with line {prev_line} ({what} {prev_value:g} vs {value:g})"
                )
                bad.append((line_no, raw, reason))
                continue
            first_seen[hex_] = (line_no, value)
        good.append((line_no, raw, hex_, value))
    return good, bad


# A row as it nearly always comes: hex digits, a comma, a plain decimal number. Rows
# that match are read column-wise; the rest go through ``split_rows`` one by one,
# which finds the reason of a bad one (or reads an unusual good one).
PLAIN_ROW = r"^[ \t]*([0-9A-Fa-f]+)[ \t]*,[ \t]*([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[ \t]*$"


GOOD = {"line_no": pl.Int64, "hex": pl.Utf8, "value": pl.Float64}


def measurement_rows(lines: list[tuple[int, str]], bounds: tuple[float, float]) -> tuple[pl.DataFrame, list]:
    """The well-formed measurement rows of a chunk as a frame of ``GOOD``, and the
    (line_no, raw, reason) of the rest."""
    frame = pl.DataFrame(
        {"line_no": [n for n, _ in lines], "raw": [r for _, r in lines]}, schema={"line_no": pl.Int64, "raw": pl.Utf8}
    )
    parts = frame["raw"].str.extract_groups(PLAIN_ROW)
    least, most = bounds
    frame = frame.with_columns(
        hex=parts.struct.field("1").str.to_lowercase(), value=parts.struct.field("2").cast(pl.Float64)
    ).with_columns(
        plain=(pl.col("hex").str.len_bytes() % 2 == 0) & (pl.col("value") > 0) & pl.col("value").is_between(least, most)
    )
    plain = frame.filter(pl.col("plain").fill_null(False))
    other = frame.filter(~pl.col("plain").fill_null(False))
    good, bad = split_rows(other.select("line_no", "raw").rows(), "cycles", False, None, bounds)
    slow = pl.DataFrame([(n, h, v) for n, _, h, v in good], schema=GOOD, orient="row")
    return pl.concat([plain.select(list(GOOD)), slow]), bad

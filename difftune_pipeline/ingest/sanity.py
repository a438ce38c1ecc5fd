"""Whether a measurement batch is sane. It is judged once, while it is ingested and
in the same transaction, so a batch never feeds tuning before its verdict is in
``batches.status`` (``ok`` or ``failed_sanity``, with the reasons)."""

from __future__ import annotations

# A BHive block sustains at most ~4.4 instructions per cycle on Intel cores (99.9th
# percentile of the Haswell set); more than 5 on a sizeable share of rows means the
# file's unit is not cycles per 100 iterations (e.g. cycles per iteration) or the
# file is not BHive's.
MAX_QUARANTINED_FRACTION = 0.10
MAX_IPC = 5.0
MAX_IMPLAUSIBLE_FRACTION = 0.01
# The other way round: the median block of BHive's files runs 2.6-2.9 instructions a
# cycle on Intel's cores and 0.33 on Zen+ (AnICA's set; its 1st percentile 0.057). A
# batch whose median is under 0.05 (20 cycles an instruction) is a hundred times too
# slow: cycles per 100 iterations in a file named as cycles per iteration. Judged on
# batches of at least MIN_ROWS_FOR_MEDIAN measurements, where a median says something.
MIN_MEDIAN_IPC = 0.05
MIN_ROWS_FOR_MEDIAN = 10


def problems(
    source_file: str,
    n_read: int,
    n_ingested: int,
    n_quarantined: int,
    n_implausible: int,
    median_ipc: float | None,
) -> list[str]:
    """Why a batch is not sane (nothing when it is). ``n_implausible``: its
    measurements above ``MAX_IPC`` instructions per cycle; ``median_ipc``: their
    median instructions per cycle (None: it has none)."""
    out = []
    if n_ingested == 0:
        out.append(f"{source_file}: no row became a measurement")
    quarantined = n_quarantined / max(n_read, 1)
    if quarantined > MAX_QUARANTINED_FRACTION:
        out.append(
            f"{source_file}: {100 * quarantined:.1f}% of rows quarantined (limit {100 * MAX_QUARANTINED_FRACTION:g}%)"
        )
    implausible = n_implausible / max(n_ingested, 1)
    if implausible > MAX_IMPLAUSIBLE_FRACTION:
        out.append(
            f"{source_file}: {100 * implausible:.1f}% of blocks above {MAX_IPC:g} instructions per cycle: "
            "is the unit cycles per 100 iterations?"
        )
    if median_ipc is not None and n_ingested >= MIN_ROWS_FOR_MEDIAN and median_ipc < MIN_MEDIAN_IPC:
        out.append(
            f"{source_file}: the median block runs {median_ipc:.3g} instructions per cycle (under {MIN_MEDIAN_IPC:g}): "
            "a hundred times too slow? A file named .per_iteration.csv is read as cycles per iteration"
        )
    return out

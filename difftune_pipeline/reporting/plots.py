"""Figures of the evaluation, as PNG bytes (for Dagster metadata, files and the report)."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from difftune_pipeline.engine.trace import WAIT_CAUSES
from difftune_pipeline.model.metrics import mape
from difftune_pipeline.reporting.explain import STALL_COLOUR, WAIT_COLOURS


def predicted_vs_measured(frame: pl.DataFrame, title: str) -> bytes:
    """Log-log scatter of engine cycles against measured cycles (per 100
    iterations), one series per table column of ``frame`` besides ``measured``."""
    series = [c for c in frame.columns if c not in ("block_id", "hex", "measured")]
    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4.6), sharex=True, sharey=True, squeeze=False)
    lo = max(1.0, float(frame["measured"].min()) / 2)
    hi = float(max(frame["measured"].max(), *(frame[c].max() or 0 for c in series))) * 2
    for ax, name in zip(axes[0], series):
        ok = frame.filter(pl.col(name).is_not_null())
        err = mape(ok[name], ok["measured"])
        ax.scatter(ok["measured"], ok[name], s=6, alpha=0.4, edgecolors="none")
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlim=(lo, hi),
            ylim=(lo, hi),
            xlabel="measured cycles / 100 iterations",
            title=f"{name} table: MAPE {100 * err:.1f}% (n={ok.height})",
        )
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("llvm-mca cycles / 100 iterations")
    fig.suptitle(title)
    return _png(fig)


def data_uri(png: bytes) -> str:
    """A PNG inlined as a URI: figures travel inside the report and the metadata."""
    return f"data:image/png;base64,{base64.b64encode(png).decode()}"


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inlined as markdown (rendered by the Dagster UI)."""
    return f"![{alt}]({data_uri(png)})"


EXECUTING_COLOUR, RETIRE_LAG_COLOUR = "#2ca02c", "#d9d9d9"
MAX_TIMELINE_ROWS = 48


def timeline(view: dict, asm: list[str], title: str) -> bytes:
    """An explanation's timeline as a figure: one row per instruction and
    iteration, one column per cycle; waits coloured by cause, execution in green,
    the wait to retire in grey; D and R mark dispatch and retirement."""
    entries = view["timeline"][:MAX_TIMELINE_ROWS]
    width = max((e["retired"] for e in entries), default=0) + 1
    fig, ax = plt.subplots(figsize=(min(18, 4 + 0.22 * width), 1 + 0.28 * len(entries)))
    for row, e in enumerate(entries):
        for first, last, cause in e["waits"]:
            ax.broken_barh([(first, last - first + 1)], (row - 0.4, 0.8), color=WAIT_COLOURS.get(cause, STALL_COLOUR))
        if e["executed"] > e["issued"]:
            ax.broken_barh([(e["issued"], e["executed"] - e["issued"])], (row - 0.4, 0.8), color=EXECUTING_COLOUR)
        if e["retired"] > e["executed"] + 1:
            ax.broken_barh(
                [(e["executed"] + 1, e["retired"] - e["executed"] - 1)], (row - 0.4, 0.8), color=RETIRE_LAG_COLOUR
            )
        ax.text(e["dispatched"] + 0.5, row, "D", ha="center", va="center", fontsize=7)
        ax.text(e["retired"] + 0.5, row, "R", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(entries)), [f"[{e['iteration']},{e['index']}] {asm[e['index']][:36]}" for e in entries])
    ax.set(xlim=(0, width), ylim=(len(entries) - 0.5, -0.5), xlabel="cycle", title=title)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*WAIT_COLOURS.values(), STALL_COLOUR, EXECUTING_COLOUR)]
    names = [f"waiting: {WAIT_CAUSES[c]}" for c in WAIT_COLOURS] + ["dispatch stall", "executing"]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
    return _png(fig)


def port_pressure(views: list[dict], title: str) -> bytes:
    """Cycles per iteration on each resource unit, one bar per explained table."""
    units = [u for u in views[0]["units"] if any(v["pressure_per_iteration"].get(u, 0) >= 0.005 for v in views)]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(units) + 2), 3.4))
    width = 0.8 / len(views)
    for k, v in enumerate(views):
        xs = [i + k * width for i in range(len(units))]
        ax.bar(xs, [v["pressure_per_iteration"].get(u, 0.0) for u in units], width, label=v["label"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(units))], units, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="cycles / iteration", title=title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()

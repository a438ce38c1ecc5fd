"""Figures of the evaluation, as PNG bytes (for Dagster metadata, files and the report)."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from difftune_pipeline.model.metrics import mape


def predicted_vs_measured(frame: pl.DataFrame, title: str) -> bytes:
    """Log-log scatter of engine cycles against measured cycles (per 100
    iterations), one series per table column of ``frame`` besides ``measured``."""
    series = [c for c in frame.columns if c not in ("block_id", "measured")]
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
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inlined as markdown (rendered by the Dagster UI and in the HTML report)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"

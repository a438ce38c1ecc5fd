"""The HTML report: per µarch, llvm-mca as shipped, LLVM's table under the chosen
model and the learned table through the real engine,
by slice (ML kernels set beside the rest), the predicted-vs-measured plot, the
parameters that moved, why the notable blocks cost what they cost (timelines
and port pressure, learned against default), and the surrogates behind them. Self-contained: plots
are inlined, so the file can be mailed or archived."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from difftune_pipeline.engine import MEASURES, Engine, ParamTable
from difftune_pipeline.model.metrics import MIN_SLICE_BLOCKS
from difftune_pipeline.reporting import plots
from difftune_pipeline.reporting.anatomy import OFF, anatomy
from difftune_pipeline.reporting.compare import (
    by_measure,
    changed_parameters,
    three_tables,
    worse_summary,
)
from difftune_pipeline.reporting.explain import change_text, explain, notable
from difftune_pipeline.warehouse import evaluation, simulations, tables

# The GPGPU-Sim validation on ML workloads (Khairy et al.) reports the simulator
# within this error of hardware; the report sets the ML-kernel slices beside it.
GPGPU_SIM_ML_ERROR = 0.18

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
.worse{background:#fde2e2}img{max-width:100%}pre{font-size:85%;background:#f7f7f7;padding:.5em}"""
EXPLAINED_ROWS = 2  # iterations of each notable block drawn on its timeline
TOP_CHANGES = 10
ANATOMY_ROWS = 30  # slices shown in "where the error is"


def table_html(frame: pl.DataFrame, highlight: str | None = None) -> str:
    """A frame as an HTML table; rows where boolean column ``highlight`` is true are marked."""

    def cell(v):
        return "" if v is None else f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    rows = []
    for row in frame.iter_rows(named=True):
        cls = ' class="worse"' if highlight and row.get(highlight) else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{cell(v)}</td>" for v in row.values()) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _pct(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns((pl.col("^.*_mape$") * 100).round(2)).rename(
        {c: c + "_pct" for c in frame.columns if c.endswith("_mape")}
    )


def uarch_section(db, row: dict) -> str:
    """One µarch's section from its newest comparison (``evaluation.results``' row)."""
    uarch = row["uarch"]
    compared = {"llvm-mca": row["llvm_mca_id"], "default": row["default_id"], "learned": row["learned_id"]}
    measure = row["measure"]
    evals = evaluation.evaluations(db, uarch, list(compared.values()), measure)
    if row["learned_id"] is None or evals.is_empty():
        return f"<h2>{html.escape(uarch)}</h2><p>Not evaluated yet: materialise <code>evaluation</code>.</p>"
    predicted, comparison = three_tables(db, uarch, compared, evals, measure)
    both = (
        by_measure(db, uarch, compared)
        .sort(pl.col("measure") != measure, maintain_order=True)  # the one scored first
        .select("measure", "table", (100 * pl.col("mape")).round(2).alias("mape_pct"), "kendall_tau")
    )
    share = row["test_worse_share"]
    table = _pct(comparison)
    test = table.filter(pl.col("split") == "test")
    ml = test.filter(pl.col("slice").str.starts_with("ml:")).with_columns(
        (pl.col("learned_mape_pct") <= 100 * GPGPU_SIM_ML_ERROR).alias("within_gpgpu_sim_18pct")
    )
    note = tables.table_note(db, row["learned_id"])
    tuner = json.loads(note).get("tuner", "surrogate") if note else "unknown"
    code = {name: f"<code>{html.escape(table_id)}</code>" for name, table_id in compared.items()}
    parts = [
        f"<h2>-mcpu={html.escape(uarch)}</h2>",
        f"<p>Three tables side by side: <b>llvm-mca</b>, llvm-mca as shipped (LLVM's table under llvm-mca's own"
        f" model, {code['llvm-mca']}); <b>default</b>, LLVM's table under the model the pipeline chose"
        f" ({html.escape(row['model'])}, {code['default']}); <b>learned</b> ({code['learned']}, tuner:"
        f" {html.escape(tuner)}). Every figure is the real engine (llvm-mca's library) at 100 iterations against"
        f" measured cycles per 100 iterations, scored by the <b>{MEASURES[measure]}</b>.</p>",
        "<h3>Overall</h3>",
        table_html(table.filter(pl.col("slice") == "all"), "worse"),
        "<p>Test blocks the learned table predicts more than 20 points worse than the default:"
        f" {'–' if share is None else f'{100 * share:.2f}%'}.</p>",
        f"<p>The test split by both measures ({MEASURES['steady']}; {MEASURES['total']}):</p>",
        table_html(both, None),
        f"<p>Slices of test the learned table makes worse than the default: {html.escape(worse_summary(comparison))}."
        f" A slice counts only with at least {MIN_SLICE_BLOCKS} blocks and a bootstrap 95% interval of the"
        " difference in MAPE above zero.</p>",
    ]
    png = scatter_png(predicted, uarch)
    if png is not None:
        parts.append(_img(png, "predicted vs measured"))
    parts += [
        "<h3>ML workloads</h3>",
        f"<p>Blocks from TensorFlow, Eigen and OpenBLAS against the rest (<code>ml:none</code>), beside the "
        f"{100 * GPGPU_SIM_ML_ERROR:g}% error the GPGPU-Sim validation reports on ML workloads.</p>",
        table_html(ml, "worse") if ml.height else "<p>No block of the test split comes from an ML kernel.</p>",
        "<h3>By slice (test)</h3>",
        table_html(test, "worse"),
        "<h3>Where the error is (test, learned table)</h3>",
        f"<p>The blocks within {OFF:.0%} of their measurement against the rest, then each slice: its blocks,"
        " their MAPE, their share of all the error, their share of the pairs Kendall's &tau; counts against the"
        " table (ordered one way by it and the other by the measurements) and the share of them more than"
        f" {OFF:.0%} off, largest share of the error first (<code>bench/error_anatomy.py</code> sets the"
        " default beside it).</p>",
        table_html(anatomy(predicted, "learned", evaluation.block_slices(db, uarch)).head(ANATOMY_ROWS)),
    ]
    learned, default = tables.load_table(db, row["learned_id"]), tables.load_table(db, row["default_id"])
    parts += ["<h3>Parameters that moved most</h3>", table_html(changed_parameters(default, learned))]
    parts += ["<h3>Why: the blocks the learned table changed most</h3>"]
    parts += [explained_html(e) for e in explained_blocks(Engine(uarch), predicted, default, learned)]
    return "\n".join(parts)


def explained_blocks(engine: Engine, predicted: pl.DataFrame, default: ParamTable, learned: ParamTable) -> list[dict]:
    """The test blocks the learned table improved most, worsened most and still
    predicts worst (``predicted``: ``compare.predicted_vs_measured`` of the two),
    each explained under the learned table against the default, with its timelines
    and port-pressure chart (PNG)."""
    out = []
    for case, block_id in notable(predicted):
        row = predicted.filter(pl.col("block_id") == block_id).row(0, named=True)
        block = engine.disassemble(row["hex"])
        try:
            why = explain(
                engine,
                block,
                learned,
                label="learned",
                against=default,
                against_label="default",
                shown=EXPLAINED_ROWS,
                base=default,  # LLVM's table over every measured block: this one's variants included
            )
        except ValueError as exc:  # a block too long to explain: said, not skipped
            out.append({"case": case, "block_id": block_id, "hex": row["hex"], "error": str(exc)})
            continue
        why["measured"] = row["measured"]
        views = [v for v in why["views"] if v["cycles"] is not None]
        title = f"{case}: block {block_id[:12]}"
        out.append(
            {
                "case": case,
                "block_id": block_id,
                "hex": row["hex"],
                "explanation": why,
                "timelines": [plots.timeline(v, why["asm"], f"{title}, {v['label']} table") for v in views],
                "pressure": plots.port_pressure(views, f"{title}: port pressure") if views else None,
            }
        )
    return out


def explained_summary(e: dict) -> pl.DataFrame:
    """One row per table of an explained block: cycles, error, bottleneck, busiest unit."""
    why = e["explanation"]
    rows = []
    for v in why["views"]:
        b = v.get("bottleneck", {})
        rows.append(
            {
                "table": v["label"],
                "total_cycles": v["cycles"],
                "steady_cycles_per_100": v.get("steady_cycles_per_100"),
                "measured": why["measured"],
                "steady_error_pct": 100 * (v["steady_cycles_per_100"] - why["measured"]) / why["measured"]
                if v["cycles"]
                else None,
                "bottleneck": b.get("kind"),
                "busiest_unit": b.get("busiest_unit"),
                "busiest_unit_cycles": b.get("busiest_unit_cycles_per_iteration"),
                **{f"waiting_{k}": n for k, n in v.get("wait_cycles", {}).items()},
            }
        )
    return pl.DataFrame(rows)


def explained_changes(e: dict) -> pl.DataFrame:
    """The rows of an explained block where the tables differ, largest effect first."""
    return pl.DataFrame(
        [
            {
                "row": c["row"],
                "parameters": change_text(c),
                "cycles_without": c["cycles_without"],
                "effect": c["effect"],
            }
            for c in (e["explanation"].get("changes") or [])[:TOP_CHANGES]
        ],
        schema={"row": pl.Utf8, "parameters": pl.Utf8, "cycles_without": pl.Int64, "effect": pl.Int64},
    )


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="{plots.data_uri(png)}">'


def _no_changes(why: dict) -> str:
    if why.get("changes") is None:
        return f"Not computed: the learned table's simulation failed ({why['views'][0]['status']})."
    return "None: the tables agree on this block."


def explained_html(e: dict) -> str:
    head = f"<h4>{html.escape(e['case'])}: block <code>{html.escape(e['block_id'])}</code></h4>"
    if "error" in e:
        return f"{head}<p>{html.escape(e['error'])}</p>"
    why = e["explanation"]
    parts = [
        head,
        "<pre>" + html.escape("\n".join(why["asm"])) + "</pre>",
        table_html(explained_summary(e)),
        "<p>Rows of this block where the tables differ, with the cycles once that change alone is undone:</p>",
        table_html(explained_changes(e)) if why.get("changes") else f"<p>{html.escape(_no_changes(why))}</p>",
        *(_img(png, f"timeline of {e['block_id']}") for png in e["timelines"]),
    ]
    if e["pressure"] is not None:
        parts.append(_img(e["pressure"], f"port pressure of {e['block_id']}"))
    return "\n".join(parts)


def scatter_png(predicted: pl.DataFrame, uarch: str) -> bytes | None:
    """Engine cycles of both tables against measured cycles on test, or None before evaluation."""
    return plots.predicted_vs_measured(predicted, f"-mcpu={uarch}, test blocks") if predicted.height else None


def build(db, out: Path) -> Path:
    """Write the report for every µarch with an evaluation; returns the path."""
    results = evaluation.results(db).filter(pl.col("learned_id").is_not_null())
    if results.is_empty():
        raise ValueError(f"no evaluation in {db}: materialise learned_params and evaluation first")
    runs = simulations.surrogate_summary(db)
    sections = [uarch_section(db, r) for r in results.iter_rows(named=True)]
    body = "\n".join(
        [
            "<h1>difftune-pipeline report</h1>",
            f"<p>Warehouse <code>{html.escape(str(db))}</code>, written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.</p>",
            *sections,
            "<h2>Surrogates</h2>",
            table_html(runs),
        ]
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>difftune-pipeline report</title>"
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )
    return out

"""Where the error lives, per µarch of a materialised warehouse: the blocks
predicted within 20% of their measurement against the rest, and per slice
(instruction class, bottleneck, length, x87 assists, unexplained blocks) the
blocks, their MAPE, their share of all the error, their share of the pairs
Kendall's tau counts against the table and the share of them more than 20% off,
for LLVM's values under the chosen model and for the learned table side by side.
Val by default (design on it); ``--split test`` gives the final figure.

    .venv/bin/python bench/error_anatomy.py --db warehouse/difftune.duckdb [--uarch haswell] [--split val] [--top 25]
"""

import argparse
from pathlib import Path

import polars as pl

from difftune_pipeline.reporting.anatomy import anatomy
from difftune_pipeline.reporting.compare import predicted_vs_measured
from difftune_pipeline.warehouse import evaluation


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--uarch", nargs="*", default=None)
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--top", type=int, default=25, help="slices shown, by the learned table's share of the error")
    args = parser.parse_args()
    pl.Config.set_tbl_rows(args.top + 5).set_tbl_width_chars(160).set_tbl_hide_dataframe_shape(True)
    for row in evaluation.results(args.db).iter_rows(named=True):
        if row["learned_id"] is None or (args.uarch and row["uarch"] not in args.uarch):
            continue
        ids = {"default": row["default_id"], "learned": row["learned_id"]}
        predicted = predicted_vs_measured(args.db, row["uarch"], ids, split=args.split, measure=row["measure"])
        memberships = evaluation.block_slices(args.db, row["uarch"])
        default, learned = (anatomy(predicted, name, memberships) for name in ids)
        both = learned.join(default, on="slice", suffix="_default").select(
            "slice",
            pl.format("{} → {}", "blocks_default", "blocks").alias("blocks"),
            pl.format("{} → {}", "mape_pct_default", "mape_pct").alias("mape_pct"),
            pl.format("{} → {}", "error_share_pct_default", "error_share_pct").alias("error_share_pct"),
            pl.format("{} → {}", "discordant_share_pct_default", "discordant_share_pct").alias("discordant_share_pct"),
            pl.format("{} → {}", "beyond_20_pct_default", "beyond_20_pct").alias("beyond_20_pct"),
        )
        print(f"\n{row['uarch']} ({row['model']}, {args.split}, {row['measure']}): default → learned")
        print(both.head(args.top))


if __name__ == "__main__":
    main()

"""The learned table: the configured tuners (``Settings.tuner``) against the
train measurements, selected on val with the real engine."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace

from difftune_pipeline.determinism import deterministic, seed_of
from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.steps import tuning_records
from difftune_pipeline.steps.context import CODE_VERSIONS, StepContext, fingerprint
from difftune_pipeline.steps.results import Learned
from difftune_pipeline.steps.surrogate import latest_surrogate, load_surrogate
from difftune_pipeline.tuners import Problem, SurrogateView, Tuner, compose, run
from difftune_pipeline.warehouse import ingestion, tables, writer


def learn(ctx: StepContext, log=print) -> Learned:
    """Learns only when the measurements, the surrogate, the tuners' settings or
    the code changed. Returns the table id and the val MAPE of the default and
    learned tables (the ``no_worse_than_default`` check reads them)."""
    settings = ctx.settings
    tuners = compose(settings.tuner, settings.tune, settings.search, settings.prune)
    needs_surrogate = any(t.needs_surrogate for t in tuners)
    surrogate_run = latest_surrogate(ctx) if needs_surrogate else None
    run_id = surrogate_run and surrogate_run["run_id"]
    default_id, default = ctx.default_table()
    table_id = _learned_id(ctx, tuners, run_id, default_id)
    if tables.table_exists(ctx.db, table_id):
        stored = json.loads(tables.table_note(ctx.db, table_id) or "{}").get("val_mape")
        figures = stored or _val_figures(ctx, default, tables.load_table(ctx.db, table_id))
        return Learned(table_id, True, **figures)
    # the tuners' draws follow from what they learn from (determinism.seed_of)
    inputs = (run_id, ingestion.measurement_totals(ctx.db, ctx.uarch))
    tuners = compose(
        settings.tuner,
        replace(settings.tune, seed=seed_of(settings.tune.seed, *inputs)),
        replace(settings.search, seed=seed_of(settings.search.seed, *inputs)),
        settings.prune,
    )
    view = _surrogate_view(ctx, surrogate_run) if needs_surrogate else None
    train_frame, train_blocks = ctx.blocks("train")
    val_frame, val_blocks = ctx.blocks("val")
    ids = {"train": train_frame["block_id"].to_list(), "val": val_frame["block_id"].to_list()}
    problem = Problem(
        engine=ctx.engine,
        blocks=[train_blocks[b] for b in train_frame["block_id"]],
        measured=train_frame["cycles_per_100"].to_numpy(),
        default=default,
        score=lambda t: ctx.score(t, "val")[0],
        surrogate=view,
        log=log,
        measure=settings.measure,
        val_blocks=[val_blocks[b] for b in val_frame["block_id"]],
        val_measured=val_frame["cycles_per_100"].to_numpy(),
        record=tuning_records.recorder(ctx, default_id, ids),
    )
    t0 = time.perf_counter()
    with deterministic(settings.surrogate_config.threads):
        best, history, stages = run(tuners, problem)
    seconds = time.perf_counter() - t0
    figures = _val_figures(ctx, default, best)
    note = {
        "tuner": settings.tuner,
        "surrogate": run_id,
        "tune": asdict(settings.tune),
        "search": asdict(settings.search),
        "prune": asdict(settings.prune),
        "measure": settings.measure,
        "history": history,
        "stages": stages,
        "seconds": seconds,
        "val_mape": figures,
    }
    with writer(ctx.db) as con:
        tables.save_table(
            con,
            table_id,
            best,
            kind="learned",
            parent_id=default_id,
            space_id=view and view.space.fingerprint(),
            note=json.dumps(note),
        )
    return Learned(
        table_id,
        False,
        **figures,
        history=history,
        stages=stages,
        seconds=seconds,
        changed_rows=len(best.changed_rows(default)),
    )


def _learned_id(ctx: StepContext, tuners: list[Tuner], surrogate_run_id: str | None, default_id: str) -> str:
    """What the learned table depends on: the start (LLVM's table under the chosen
    model, whose id changes with the engine's model: a tuner without a surrogate
    has nothing else that does), the tune and search settings in their own slots
    (None when unused), then any other tuner's. A new setting of a tuner changes
    the ids of its tables, which are then learned again."""
    configs = {t.stage: t.config for t in tuners}
    return f"learned-{ctx.uarch}-" + fingerprint(
        CODE_VERSIONS["learned_params"],
        surrogate_run_id,
        default_id,
        ingestion.measurement_totals(ctx.db, ctx.uarch),
        ctx.settings.tuner,
        ctx.settings.measure,
        configs.pop("surrogate", None),
        configs.pop("search", None),
        *configs.values(),
    )


def _surrogate_view(ctx: StepContext, surrogate_run: dict) -> SurrogateView:
    """The surrogate's predictors over the train and val blocks, in its parameter space."""
    surrogate = load_surrogate(surrogate_run)
    predict = {}
    for split in ("train", "val"):
        frame, blocks = ctx.blocks(split)
        predict[split] = surrogate.predictor([blocks[b] for b in frame["block_id"]])
    space = ParamSpace.create(surrogate.row_keys, ctx.engine, ctx.default_table()[1])
    return SurrogateView(predict["train"], space, surrogate.model, predict["val"])


def _val_figures(ctx: StepContext, default: ParamTable, learned: ParamTable) -> dict:
    return {"default_val_mape": ctx.score(default, "val")[0], "learned_val_mape": ctx.score(learned, "val")[0]}

"""The surrogate trained on the simulations (``Settings.surrogate_model``): a
checkpoint under ``warehouse/models/`` and a row in ``surrogate_runs``."""

from __future__ import annotations

import functools
import json
from dataclasses import asdict
from pathlib import Path

import polars as pl

from difftune_pipeline.model.sampling import PairFile, Pairs, Split, training_pairs
from difftune_pipeline.steps.context import CODE_VERSIONS, StepContext, fingerprint
from difftune_pipeline.steps.results import SurrogateTrained
from difftune_pipeline.surrogates import Surrogate, surrogate_type
from difftune_pipeline.surrogates.base import training_device
from difftune_pipeline.warehouse import connection, insert_new, simulations, writer


def train_surrogate(ctx: StepContext, log=print) -> SurrogateTrained:
    """Trains only when the simulations, the configuration or the code changed."""
    settings = ctx.settings
    kind = surrogate_type(settings.surrogate_model)
    space, default, train_blocks = ctx.space()
    tables = ctx.sampled_tables(space)
    table_ids = [t.table_id for t in tables]
    simulations.verified(ctx.db, table_ids)  # nothing learns from a damaged chunk, nor is reused as if it had not
    run_id = "surrogate-" + fingerprint(
        CODE_VERSIONS["surrogate"],
        space.fingerprint(),
        simulations.simulation_totals(ctx.db, table_ids),
        settings.surrogate_model,
        settings.surrogate_config,
        settings.iterations,
        settings.measure,
        str(training_device()),  # a GPU's result is close to the CPU's, not the same
    )
    done = simulations.surrogate_run(ctx.db, run_id)
    if done is not None and Path(done["checkpoint"]).exists():
        return SurrogateTrained(**done, device=None, reused=True)
    pairs = stored_pairs(ctx, space, default, tables, list(train_blocks))
    if pairs.n == 0:
        raise ValueError("no simulations to train on: materialise the simulations first")
    surrogate = kind.create(
        list(space.keys),
        settings.surrogate_config,
        list(train_blocks.values()),
        ctx.engine.resources(),
        space.globals,
        default.mechanisms,
    )
    report = surrogate.fit([train_blocks[b] for b in pairs.block_ids], pairs, log=log, inputs_id=run_id)
    path = ctx.models_dir / f"{run_id}.pt"
    surrogate.save(path)
    row = {
        "run_id": run_id,
        "mcpu": ctx.uarch,
        "model": kind.kind,
        "checkpoint": str(path),
        "n_train": report["n_train"],
        "n_heldout": report["n_heldout"],
        "heldout_mape": report["heldout_mape"],
        "heldout_kendall_tau": report["heldout_kendall_tau"],
        "train_seconds": report["train_seconds"],
        "config": json.dumps(asdict(settings.surrogate_config)),
        "created_at": connection.now(),
    }
    with writer(ctx.db) as con:
        insert_new(con, "surrogate_runs", pl.DataFrame([row]), ["run_id"])
    return SurrogateTrained(**row, device=report["device"], reused=False)


def stored_pairs(ctx: StepContext, space, default, tables: list, block_ids: list[str]) -> Pairs:
    """The simulated pairs of sampled ``tables`` over ``block_ids``, as a surrogate streams them."""
    table_ids, iterations = [t.table_id for t in tables], ctx.settings.iterations
    counts = simulations.pair_counts(ctx.db, iterations, table_ids)
    return training_pairs(
        counts,
        functools.partial(_split, ctx.db, iterations, table_ids, ctx.settings.measure),
        space,
        default,
        tables,
        block_ids,
    )


def _split(db: str, iterations: int, table_ids: list[str], measure: str, block_ids, held, key, folder) -> Split:
    """The pairs written, split and ordered, to files a surrogate streams from."""
    (train, n_train), (held_out, n_held), median = simulations.write_pairs(
        db, iterations, table_ids, block_ids, held, key, folder, measure
    )
    trained_on = PairFile(train, n_train)
    try:
        return Split(trained_on, PairFile(held_out, n_held), median)
    except OSError:
        trained_on.close()
        raise


def latest_surrogate(ctx: StepContext) -> dict:
    """The run of the newest trained surrogate of this µarch and the configured model.
    New measurements re-tune through it until the next full re-tune trains a new one."""
    model = ctx.settings.surrogate_model
    for run in simulations.surrogate_runs(ctx.db, ctx.uarch, model):
        if Path(run["checkpoint"]).exists():
            return run
    raise ValueError(f"no trained {model} surrogate for {ctx.uarch}: materialise the surrogate first")


def load_surrogate(run: dict) -> Surrogate:
    return surrogate_type(run["model"]).load(run["checkpoint"])

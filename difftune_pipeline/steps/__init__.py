"""The DiffTune steps over the warehouse, one module per asset, every one idempotent:
a step whose inputs, configuration and code are unchanged finds its result
stored and does no work. Dagster assets (``defs/``) call these; so can a
notebook or a script:

    ctx = StepContext("warehouse/difftune.duckdb", Engine("haswell"), settings_for("sample"))
    simulate_shard(ctx, 0)
"""

from difftune_pipeline.steps.accesses import record_accesses
from difftune_pipeline.steps.context import StepContext
from difftune_pipeline.steps.default_params import default_params
from difftune_pipeline.steps.evaluation import evaluate, evaluate_latest
from difftune_pipeline.steps.features import block_features
from difftune_pipeline.steps.learned_params import learn
from difftune_pipeline.steps.sampled_tables import sampled_tables
from difftune_pipeline.steps.simulations import simulate_shard
from difftune_pipeline.steps.surrogate import latest_surrogate, train_surrogate

__all__ = [
    "StepContext",
    "block_features",
    "default_params",
    "evaluate",
    "evaluate_latest",
    "latest_surrogate",
    "learn",
    "record_accesses",
    "sampled_tables",
    "simulate_shard",
    "train_surrogate",
]

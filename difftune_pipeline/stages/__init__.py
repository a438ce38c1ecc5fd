"""The DiffTune stages over the warehouse, one module each, every one idempotent:
a stage whose inputs, configuration and code are unchanged finds its result
stored and does no work. Dagster assets (``defs/``) call these; so can a
notebook or a script:

    ctx = StageContext("warehouse/difftune.duckdb", Engine("haswell"), settings_for("sample"))
    simulate_shard(ctx, 0)
"""

from difftune_pipeline.stages.context import StageContext
from difftune_pipeline.stages.default_params import default_params
from difftune_pipeline.stages.evaluation import evaluate, evaluate_latest
from difftune_pipeline.stages.features import block_features
from difftune_pipeline.stages.learned_params import learn
from difftune_pipeline.stages.sampled_tables import sampled_tables
from difftune_pipeline.stages.simulations import simulate_shard
from difftune_pipeline.stages.surrogate import latest_surrogate, train_surrogate

__all__ = [
    "StageContext",
    "block_features",
    "default_params",
    "evaluate",
    "evaluate_latest",
    "latest_surrogate",
    "learn",
    "sampled_tables",
    "simulate_shard",
    "train_surrogate",
]

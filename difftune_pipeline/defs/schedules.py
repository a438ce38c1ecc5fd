"""The nightly full re-tune: re-sample the parameter tables over the current
train blocks; simulations, surrogate, learned parameters and evaluation follow
through their automation conditions, each doing only the work that changed."""

import dagster as dg

from difftune_pipeline.defs.automation import RETUNE_CRON

nightly_retune = dg.ScheduleDefinition(
    name="nightly_retune",
    cron_schedule=RETUNE_CRON,
    execution_timezone="UTC",
    target=dg.AssetSelection.assets("sampled_tables"),
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Full re-tune (cron from DIFFTUNE_RETUNE_CRON, default 02:00 UTC)",
)

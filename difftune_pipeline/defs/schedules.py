"""The nightly full re-tune: re-sample the parameter tables of every µarch
with measurements; simulations, surrogate, learned parameters and evaluation
follow through their automation conditions, each doing only the work that changed."""

import dagster as dg

from difftune_pipeline.defs.automation import RETUNE_CRON
from difftune_pipeline.defs.partitions import UARCHS


@dg.schedule(
    name="nightly_retune",
    cron_schedule=RETUNE_CRON,
    execution_timezone="UTC",
    target=dg.AssetSelection.assets("sampled_tables"),
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Full re-tune of each µarch (cron from DIFFTUNE_RETUNE_CRON, default 02:00 UTC)",
)
def nightly_retune(context: dg.ScheduleEvaluationContext):
    uarchs = context.instance.get_dynamic_partitions(UARCHS.name)
    if not uarchs:
        return dg.SkipReason("no µarch has measurements yet")
    date = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return [dg.RunRequest(partition_key=u, run_key=f"{u}-{date}") for u in uarchs]

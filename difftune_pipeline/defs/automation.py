"""When assets re-run on their own: downstream of new measurements, and nightly."""

import os

import dagster as dg

# Re-run when an upstream asset is updated (a new batch, a new surrogate), once
# nothing upstream is missing or in progress and no upstream blocking check failed.
# A batch that failed its sanity check is the exception: it never feeds tuning
# (``usable_measurements``), so it does not hold back the re-tune of the others.
FOLLOWS_UPSTREAM = (
    dg.AutomationCondition.eager()
    & ~dg.AutomationCondition.any_deps_match(
        dg.AutomationCondition.any_checks_match(dg.AutomationCondition.check_failed(), blocking_only=True)
    ).ignore(dg.AssetSelection.assets("measurements", "measurement_batches"))
).with_label("follows upstream")

RETUNE_CRON = os.environ.get("DIFFTUNE_RETUNE_CRON", "0 2 * * *")


# Evaluates the conditions above. Dagster's default automation sensor starts
# stopped; this one runs as soon as the daemon does, so re-tuning needs no click.
retune_automation = dg.AutomationConditionSensorDefinition(
    "retune_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Runs the automation conditions: re-tuning after new batches",
)

"""When assets re-run on their own: downstream of new measurements, and nightly."""

import os

import dagster as dg

# Re-run when an upstream asset is updated (a new batch, a new surrogate), once
# nothing upstream is missing or in progress and no upstream blocking check failed.
# A batch that failed its sanity check is the exception: it never feeds tuning
# (``usable_measurements``), so it does not hold back the re-tune of the others.
_BLOCKED = dg.AutomationCondition.any_deps_match(
    dg.AutomationCondition.any_checks_match(dg.AutomationCondition.check_failed(), blocking_only=True)
)
FOLLOWS_UPSTREAM = (
    dg.AutomationCondition.eager() & ~_BLOCKED.ignore(dg.AssetSelection.assets("measurements", "measurement_batches"))
).with_label("follows upstream")

# The µarch-partitioned stages after ``default_params`` re-run when an upstream
# partition's data version changes, not on every new materialisation: a batch for
# one µarch re-runs ``default_params`` of every µarch (a cheap check of what it
# reads), but only the µarch whose measurements changed gets a new data version,
# so only its tuning re-runs.
FOLLOWS_UPSTREAM_DATA = (
    (
        dg.AutomationCondition.newly_missing()
        | dg.AutomationCondition.any_deps_match(dg.AutomationCondition.data_version_changed())
    ).since_last_handled()
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
    & ~_BLOCKED
).with_label("follows upstream data")

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

"""Dagster entry point: every definition under ``difftune_pipeline/defs``."""

from pathlib import Path

from dagster import definitions, load_from_defs_folder

from difftune_pipeline.defs.versions import with_versions


@definitions
def defs():
    """Every definition, each asset's code version as this environment's settings make it."""
    return with_versions(load_from_defs_folder(path_within_project=Path(__file__).parent))

"""The ``difftune`` command: one module per group of commands."""

from difftune_pipeline.cli import batches, explain, materialize, params, pipeline, results, simulate, verify  # noqa: F401
from difftune_pipeline.cli.common import app

__all__ = ["app"]

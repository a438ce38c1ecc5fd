"""The ``difftune`` command: one module per group of commands."""

from difftune_pipeline.cli import batches, explain, params, pipeline, simulate  # noqa: F401  (each registers its commands)
from difftune_pipeline.cli.common import app

__all__ = ["app"]

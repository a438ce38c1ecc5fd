"""difftune-pipeline: DiffTune as a Dagster asset graph over LLVM's MCA."""

from difftune_pipeline import determinism  # noqa: F401  (sets MKL's reproducibility before torch computes)

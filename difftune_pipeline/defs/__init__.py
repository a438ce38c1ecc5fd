"""The Dagster layer: thin assets, resources and checks over the core modules."""

"""The DuckDB warehouse: its schema and migrations (``schema``), connections
(``connection``) and every query the pipeline runs (``queries``)."""

from difftune_pipeline.warehouse.connection import DEFAULT_PATH, connect, insert_new, query, scalar, writer

__all__ = ["DEFAULT_PATH", "connect", "insert_new", "query", "scalar", "writer"]

"""The DuckDB warehouse: its schema and migrations (``schema``), connections
(``connection``) and every statement the pipeline runs, by what it serves
(``ingestion``, ``tables``, ``simulations``, ``evaluation``)."""

from difftune_pipeline.warehouse.connection import DEFAULT_PATH, insert_new, query, writer

__all__ = ["DEFAULT_PATH", "insert_new", "query", "writer"]

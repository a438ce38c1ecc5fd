"""The Dagster definitions load, and materialising twice adds nothing."""

import dagster as dg
import pytest

from difftune_pipeline.definitions import defs
from difftune_pipeline.defs.resources import DataSources, DiffTuneSettings, EngineResource, Warehouse
from difftune_pipeline.warehouse import connection as store


def test_definitions_load():
    definitions = defs()
    dg.Definitions.validate_loadable(definitions)
    keys = {k.to_user_string() for k in definitions.resolve_asset_graph().get_all_asset_keys()}
    assert {
        "measurements",
        "measurement_batches",
        "block_sources",
        "blocks",
        "splits",
        "quarantine",
        "default_params",
        "sampled_tables",
        "simulations",
        "surrogate",
        "learned_params",
        "evaluation",
    } <= keys


@pytest.mark.slow
def test_materialise_the_ingestion_graph_twice(warehouse):
    definitions = defs()
    assets = [
        a
        for a in definitions.assets
        if isinstance(a, dg.AssetsDefinition) and a.group_names_by_key[a.key] == "ingest" and a.partitions_def is None
    ]
    assert len(assets) == 5  # the inbox's batches are partitioned: tests/test_operations.py
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "engine": EngineResource(),
        "sources": DataSources.for_profile("sample", None),
    }
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(assets, resources=resources, instance=instance).success
    tables = ["blocks", "measurements", "block_sources", "splits", "quarantine", "batches"]
    counts = {t: store.query(f"SELECT count(*) FROM {t}", warehouse).item() for t in tables}
    assert counts["measurements"] == 2000 and counts["splits"] == counts["blocks"]
    read = store.query("SELECT sum(n_read) - sum(n_ingested) - sum(n_quarantined) FROM batches", warehouse).item()
    assert read == 0
    again = dg.materialize(assets, resources=resources, instance=instance)
    assert again.success
    assert {t: store.query(f"SELECT count(*) FROM {t}", warehouse).item() for t in tables} == counts
    meta = again.asset_materializations_for_node("measurements")[0].metadata
    assert meta["new_batches"].value == 0 and meta["dagster/row_count"].value == 2000


def test_environment_overrides_reach_the_runs(monkeypatch):
    monkeypatch.setenv("DIFFTUNE_PROFILE", "smoke")
    monkeypatch.setenv("DIFFTUNE_TUNER", "direct")
    monkeypatch.setenv("DIFFTUNE_SEARCH_HALVING", "1")
    monkeypatch.setenv("DIFFTUNE_SETTINGS", '{"search.rounds": 2, "structured.epochs": 7}')

    @dg.asset
    def probe(settings: DiffTuneSettings) -> dg.MaterializeResult:
        s = settings.get()
        return dg.MaterializeResult(
            metadata={
                "tuner": s.tuner,
                "halving": s.search.halving,
                "budget": s.search.budget,
                "rounds": s.search.rounds,
                "epochs": s.structured.epochs,
            }
        )

    definitions = defs()
    result = dg.materialize([probe], resources={"settings": definitions.resources["settings"]})
    meta = {k: v.value for k, v in result.asset_materializations_for_node("probe")[0].metadata.items()}
    assert meta == {"tuner": "direct", "halving": True, "budget": 3000, "rounds": 2, "epochs": 7}


def test_a_bad_override_stops_the_definitions_from_loading(monkeypatch):
    monkeypatch.setenv("DIFFTUNE_SETTINGS", '{"search.budget": "lots"}')
    with pytest.raises(Exception) as failure:  # Dagster wraps it in the error of the defs module
        defs()
    causes, error = [], failure.value
    while error is not None:
        causes.append(str(error))
        error = error.__cause__
    assert any("setting 'budget' must be of type int, got 'lots'" in c for c in causes), causes

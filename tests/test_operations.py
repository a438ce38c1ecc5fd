"""Operating the pipeline: the inbox sensor, batch ingestion with its sanity
check, automation downstream of a new batch, the nightly schedule, and the
quality checks failing on bad results."""

import json
import os
import shutil
import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest

from conftest import SAMPLE, TEST_DATA
from difftune_pipeline import quality
from difftune_pipeline.definitions import defs
from difftune_pipeline.defs import difftune as difftune_defs
from difftune_pipeline.defs import ingest as ingest_defs
from difftune_pipeline.defs.inbox import BATCHES, inbox_sensor, measurement_batches, pending
from difftune_pipeline.defs.partitions import UARCHS
from difftune_pipeline.defs.resources import (
    DataSources,
    DiffTuneSettings,
    EngineResource,
    Inbox,
    MeasurementFile,
    Warehouse,
)
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.ingest import inbox
from difftune_pipeline.steps.checks import measurement_sanity
from difftune_pipeline.warehouse import batch_state
from difftune_pipeline.warehouse import connection as store

ROWS = (SAMPLE / "bhive_hsw_sample.csv").read_text().splitlines()
SKYLAKE = (TEST_DATA / "bhive_skl_100.csv").read_text().splitlines()


def _drop(folder, name, lines, age=60.0):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    past = time.time() - age
    os.utime(path, (past, past))
    return path


def _sensor(instance, box, cursor=None):
    resources = {
        "inbox": Inbox(path=str(box), settle_seconds=5),
        "warehouse": Warehouse(path=str(box.parent / "w.duckdb")),
    }
    return inbox_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def test_sensor_new_file_once_and_never_half(tmp_path):
    box = tmp_path / "inbox"
    instance = dg.DagsterInstance.ephemeral()
    assert isinstance(_sensor(instance, box), dg.SkipReason)  # no inbox yet: nothing, no crash
    path = _drop(box / "haswell", "batch1.csv", ROWS[:50])
    _drop(box / "haswell", "batch2.csv.part", ROWS[50:60])  # a copy in flight
    _drop(box / "haswell", "batch3.csv", ROWS[60:70], age=0)  # still being written
    _drop(box, "loose.csv", ROWS[70:80])  # µarch unknown
    result = _sensor(instance, box)
    assert isinstance(result, dg.SensorResult)
    key = inbox.InboxFile(path, "haswell", "cycles_per_100").partition_key
    assert [r.partition_key for r in result.run_requests] == [key]
    assert result.dynamic_partitions_requests[0].partition_keys == [key]
    instance.add_dynamic_partitions(BATCHES.name, [key])
    assert isinstance(_sensor(instance, box, cursor=result.cursor), dg.SkipReason)  # requested once
    _ingest_batch(instance, box, box.parent / "w.duckdb", path)
    shutil.copy(path, box / "haswell" / "same_bytes_again.csv")
    os.utime(box / "haswell" / "same_bytes_again.csv", (time.time() - 60,) * 2)
    again = _sensor(instance, box)  # ingested: the same bytes under another name add nothing
    assert isinstance(again, dg.SkipReason)
    assert "batch3.csv: changed less than" in again.skip_message and "loose.csv: not under" in again.skip_message
    os.utime(box / "haswell" / "batch3.csv", (time.time() - 60,) * 2)  # now settled
    assert [r.partition_key for r in _sensor(instance, box).run_requests] != [key]
    # Another instance (a fresh DAGSTER_HOME) gets the µarch partitions the warehouse implies.
    os.remove(box / "haswell" / "batch3.csv")
    fresh = _sensor(dg.DagsterInstance.ephemeral(), box, cursor=json.dumps({}))
    adds = {r.partitions_def_name: r.partition_keys for r in fresh.dynamic_partitions_requests}
    assert adds["uarchs"] == ["haswell"]


def _ingest_batch(instance, box, warehouse, path, uarch="haswell", key=None):
    key = key or inbox.InboxFile(path, uarch, inbox.unit_of(path)).partition_key
    instance.add_dynamic_partitions(BATCHES.name, [key])
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "engine": EngineResource(),
        "inbox": Inbox(path=str(box)),
    }
    result = dg.materialize(
        [measurement_batches], resources=resources, instance=instance, partition_key=key, raise_on_error=False
    )
    return key, result


def test_a_batch_is_ingested_once_and_its_sanity_checked(tmp_path, warehouse):
    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    good = _drop(box / "haswell", "good.csv", ROWS[:40] + ["zz,12", "00,-3"])
    key, result = _ingest_batch(instance, box, warehouse, good)
    assert result.success
    assert [c.passed for c in result.get_asset_check_evaluations()] == [True]
    assert store.query("SELECT count(*) FROM measurements", warehouse).item() == 40
    assert store.query("SELECT count(*) FROM quarantine", warehouse).item() == 2
    assert _ingest_batch(instance, box, warehouse, good)[1].success
    assert store.query("SELECT count(*) FROM measurements", warehouse).item() == 40  # same batch adds nothing

    # a file in cycles per iteration dropped as cycles per 100: ingested, but the blocking check fails
    per_iteration = [f"{h},{float(c) / 100:g}" for h, c in (r.split(",") for r in ROWS[100:140])]
    bad = _drop(box / "haswell", "wrong_unit.csv", per_iteration)
    _, result = _ingest_batch(instance, box, warehouse, bad)
    check = result.get_asset_check_evaluations()[0]
    assert not check.passed and "instructions per cycle" in check.description
    assert not result.success  # blocking: nothing downstream of it runs in that run

    # the same numbers with the unit in the file name are fine
    right = _drop(box / "haswell", "right_unit.per_iteration.csv", per_iteration)
    _, result = _ingest_batch(instance, box, warehouse, right)
    assert result.success and result.get_asset_check_evaluations()[0].passed


def test_a_new_batch_starts_the_downstream_re_tune(tmp_path, warehouse):
    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    definitions = defs()
    fresh = dg.evaluate_automation_conditions(defs=definitions, instance=instance)
    assert fresh.total_requested == 0  # nothing runs on a fresh instance before its inputs exist
    for key in ("measurements", "block_sources", "blocks", "quarantine", "splits"):  # as after `make run`
        instance.report_runless_asset_event(dg.AssetMaterialization(key))
    first = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=fresh.cursor)
    _ingest_batch(instance, box, warehouse, _drop(box / "haswell", "b.csv", ROWS[:30]))
    after = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=first.cursor)
    for key in ("blocks", "quarantine"):
        assert after.get_num_requested(dg.AssetKey(key)) == 1
    assert after.get_num_requested(dg.AssetKey("sampled_tables")) == 0  # the full re-tune is the schedule's


def test_the_nightly_schedule_re_tunes_each_uarch_with_data():
    definitions = defs()
    schedule = definitions.resolve_schedule_def("nightly_retune")
    assert schedule.cron_schedule == "0 2 * * *"
    with dg.instance_for_test() as instance:
        tick = lambda: schedule.evaluate_tick(  # noqa: E731
            dg.build_schedule_context(
                instance=instance,
                scheduled_execution_time=datetime(2026, 1, 2, 2),
                repository_def=definitions.get_repository_def(),
            )
        )
        assert "no µarch has measurements" in tick().skip_message
        instance.add_dynamic_partitions(UARCHS.name, ["haswell", "skylake"])
        requests = tick().run_requests
    assert sorted(r.partition_key for r in requests) == ["haswell", "skylake"]
    assert requests[0].run_key.endswith("-2026-01-02")
    job = definitions.resolve_job_def(schedule.job_name)
    assert {k.to_user_string() for k in job.asset_layer.selected_asset_keys} == {"sampled_tables"}


def test_a_cpus_first_usable_batch_adds_its_uarch_partition(tmp_path, warehouse):
    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    _drop(box / "skylake", "s.csv", SKYLAKE[:20])
    result = _sensor(instance, box)
    assert [r.partitions_def_name for r in result.dynamic_partitions_requests] == [BATCHES.name]  # not yet
    per_iteration = [f"{h},{float(c) / 100:g}" for h, c in (r.split(",") for r in ROWS[100:140])]
    _, failed = _ingest_batch(instance, box, warehouse, _drop(box / "ivybridge", "bad.csv", per_iteration), "ivybridge")
    assert not failed.success and instance.get_dynamic_partitions(UARCHS.name) == []  # failed sanity: no partition
    _ingest_batch(instance, box, warehouse, box / "skylake" / "s.csv", "skylake")
    assert instance.get_dynamic_partitions(UARCHS.name) == ["skylake"]


DIFFTUNE = ["block_features", "sampled_tables", "simulations", "surrogate", "learned_params", "evaluation"]


def test_a_skylake_batch_re_tunes_only_skylake(tmp_path, warehouse):
    """Both µarchs tuned; a new Skylake batch re-runs every µarch's (cheap)
    default_params, and then only Skylake's tuning."""
    box, instance, definitions = tmp_path / "inbox", dg.DagsterInstance.ephemeral(), defs()
    graph = definitions.resolve_asset_graph()
    ingesting = [ingest_defs.block_sources, ingest_defs.measurements, ingest_defs.blocks, ingest_defs.splits]
    resources = {
        "warehouse": Warehouse(path=str(warehouse)),
        "engine": EngineResource(),
        "sources": DataSources(
            measurement_files=[MeasurementFile(path=str(SAMPLE / "bhive_hsw_sample.csv"), uarch="haswell")],
            corpus_files=[],
        ),
        "settings": DiffTuneSettings(profile="smoke"),
        "inbox": Inbox(path=str(box)),
    }
    _ingest_batch(instance, box, warehouse, _drop(box / "skylake", "first.csv", SKYLAKE[:60]), "skylake")
    assert dg.materialize(ingesting, resources=resources, instance=instance).success
    assert sorted(instance.get_dynamic_partitions(UARCHS.name)) == ["haswell", "skylake"]

    def default_params(uarch):
        assets = [difftune_defs.default_params]
        assert dg.materialize(assets, resources=resources, instance=instance, partition_key=uarch).success

    for uarch in ("haswell", "skylake"):
        default_params(uarch)
        for key in DIFFTUNE:  # as after a whole run
            for partition in graph.get(dg.AssetKey(key)).partitions_def.get_partition_keys(
                dynamic_partitions_store=instance
            ):
                if uarch in str(partition):
                    instance.report_runless_asset_event(dg.AssetMaterialization(key, partition=partition))
    first = dg.evaluate_automation_conditions(defs=definitions, instance=instance)
    settled = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=first.cursor)
    assert settled.total_requested == 0

    _ingest_batch(instance, box, warehouse, _drop(box / "skylake", "second.csv", SKYLAKE[60:]), "skylake")
    assert dg.materialize(ingesting[2:], resources=resources, instance=instance).success  # blocks, splits
    after = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=settled.cursor)
    assert after.get_requested_partitions(dg.AssetKey("default_params")) == {"haswell", "skylake"}
    default_params("haswell")
    default_params("skylake")
    retune = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=after.cursor)
    requested = {k: retune.get_requested_partitions(dg.AssetKey(k)) for k in ["default_params", *DIFFTUNE]}
    skylake = {"skylake"}
    assert {k: v for k, v in requested.items() if v} == {
        "block_features": skylake,
        "learned_params": skylake,
        "evaluation": skylake,
    }


def test_engine_exactness_check(haswell, sample_rows):
    hexes = [h for h, _ in sample_rows[:12]]
    assert quality.engine_exactness(haswell, hexes, lambda b: llvm_mca_many(b, "haswell")).passed
    off_by_one = quality.engine_exactness(haswell, hexes, lambda b: [c + 1 for c in llvm_mca_many(b, "haswell")])
    assert not off_by_one.passed and off_by_one.metadata["different"] == 12


def test_quality_gates_fail_on_bad_results():
    assert quality.surrogate_fidelity(0.12, 0.25).passed
    assert not quality.surrogate_fidelity(0.40, 0.25).passed
    assert not quality.surrogate_fidelity(float("nan"), 0.25).passed
    assert quality.no_worse_than_default(0.30, 0.20).passed
    assert not quality.no_worse_than_default(0.30, 0.31).passed


@pytest.mark.parametrize("lines, problem", [([], "no row became"), (["zz,1"] * 5 + ROWS[:5], "quarantined")])
def test_measurement_sanity_fails_on_bad_batches(tmp_path, warehouse, lines, problem):
    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    _, result = _ingest_batch(instance, box, warehouse, _drop(box / "haswell", "x.csv", lines or ["garbage"]))
    check = result.get_asset_check_evaluations()[0]
    assert not check.passed and problem in check.description


def test_an_inbox_folder_for_a_cpu_llvm_does_not_model_is_refused(tmp_path):
    box = tmp_path / "inbox"
    _drop(box / "foobar", "x.csv", ROWS[:10])
    skipped = _sensor(dg.DagsterInstance.ephemeral(), box)
    assert isinstance(skipped, dg.SkipReason) and "'foobar' is not a CPU LLVM" in skipped.skip_message


def test_failed_and_dropped_batches_never_feed_tuning(tmp_path, warehouse, monkeypatch):
    from typer.testing import CliRunner

    from difftune_pipeline.cli import app
    from difftune_pipeline.ingest import batches as ingest
    from difftune_pipeline.warehouse import ingestion

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    box, instance, runner = tmp_path / "inbox", dg.DagsterInstance.get(), CliRunner()
    good = _drop(box / "haswell", "good.csv", ROWS[:40])
    _, result = _ingest_batch(instance, box, warehouse, good)
    assert result.success
    per_iteration = [f"{h},{float(c) / 100:g}" for h, c in (r.split(",") for r in ROWS[100:140])]
    _, result = _ingest_batch(instance, box, warehouse, _drop(box / "haswell", "wrong_unit.csv", per_iteration))
    assert not result.get_asset_check_evaluations()[0].passed
    ingest.assign_splits(warehouse)
    everything = ["train", "val", "test"]
    kept = store.query("SELECT count(*) FROM measurements", warehouse).item()
    assert kept > 40  # the failed batch's rows stay in measurements
    assert ingestion.measured_blocks(warehouse, "haswell", everything).height == 40  # the failed batch does not count
    listed = runner.invoke(app, ["batches", "list", "--warehouse", str(warehouse), "--json"])
    statuses = {r["source_file"].rsplit("/", 1)[1]: r for r in json.loads(listed.stdout)}
    assert statuses["good.csv"]["status"] == "ok" and statuses["wrong_unit.csv"]["status"] == "failed_sanity"
    assert "instructions per cycle" in statuses["wrong_unit.csv"]["status_reason"]

    definitions = defs()
    fresh = dg.evaluate_automation_conditions(defs=definitions, instance=instance)
    for key in ("measurements", "block_sources", "blocks", "quarantine", "splits"):
        instance.report_runless_asset_event(dg.AssetMaterialization(key))
    before = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=fresh.cursor)
    good_id = statuses["good.csv"]["batch_id"]
    dropped = runner.invoke(app, ["batches", "drop", good_id, "--warehouse", str(warehouse), "--reason", "bad rig"])
    assert dropped.exit_code == 0 and "40 measurements withdrawn" in dropped.stdout, dropped.output
    after = dg.evaluate_automation_conditions(defs=definitions, instance=instance, cursor=before.cursor)
    assert after.get_num_requested(dg.AssetKey("blocks")) == 1  # the re-tune follows downstream
    assert ingestion.measured_blocks(warehouse, "haswell", everything).height == 0
    assert store.query("SELECT count(*) FROM measurements", warehouse).item() == kept - 40  # only that batch's
    assert store.query("SELECT count(*) FROM blocks", warehouse).item() == kept  # blocks stay
    row = store.query("SELECT status, status_reason FROM batches WHERE batch_id = ?", warehouse, [good_id]).row(0)
    assert row == ("dropped", "bad rig")
    assert ingest.ingest_measurements(good, "haswell", warehouse, EngineResource().decoder()).already_ingested
    assert ingestion.measured_blocks(warehouse, "haswell", everything).height == 0  # its bytes never come back
    again = runner.invoke(app, ["batches", "drop", good_id, "--warehouse", str(warehouse)])
    assert again.exit_code == 0 and "already dropped" in again.stdout
    unknown = runner.invoke(app, ["batches", "drop", "nope", "--warehouse", str(warehouse)])
    assert unknown.exit_code == 2 and "no batch 'nope'" in unknown.stderr
    elsewhere = runner.invoke(app, ["batches", "drop", f"skylake-{good_id}", "--warehouse", str(warehouse)])
    assert elsewhere.exit_code == 2 and "holds haswell's measurements, not skylake's" in elsewhere.stderr

    wrong_id = statuses["wrong_unit.csv"]["batch_id"]
    assert not measurement_sanity(warehouse, [wrong_id]).passed
    assert runner.invoke(app, ["batches", "drop", wrong_id, "--warehouse", str(warehouse)]).exit_code == 0
    verdict = measurement_sanity(warehouse, [wrong_id, good_id])  # as the next `measurements` run sees them
    assert verdict.passed and "2 dropped (not judged)" in verdict.description
    corpus = tmp_path / "tensorflow.csv"
    corpus.write_text("\n".join(f"{r.split(',')[0]},1" for r in ROWS[:5]) + "\n")
    corpus_id = ingest.ingest_corpus(corpus, warehouse, EngineResource().decoder()).batch_id
    refused = runner.invoke(app, ["batches", "drop", corpus_id, "--warehouse", str(warehouse)])
    assert refused.exit_code == 2 and "only measurement batches can be dropped" in refused.stderr
    assert store.query("SELECT count(*) FROM block_sources", warehouse).item() == 5


def test_a_batch_whose_file_vanished_is_recorded_and_blocks_nothing(tmp_path, warehouse, monkeypatch):
    from typer.testing import CliRunner

    from difftune_pipeline.cli import app

    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    path = _drop(box / "haswell", "gone.csv", ROWS[:30])
    saved = path.read_bytes()
    key = inbox.InboxFile(path, "haswell", "cycles_per_100").partition_key
    path.unlink()  # registered by the sensor, then deleted before its run
    for _ in range(2):  # the first run records it, every later one passes by
        _, result = _ingest_batch(instance, box, warehouse, path, key=key)
        assert result.success
    event = result.get_asset_materialization_events()[0].materialization
    assert event.metadata["status"].value == "vanished"
    row = store.query("SELECT status, status_reason FROM batches", warehouse).row(0)
    assert row[0] == "vanished" and "no file has the bytes of batch" in row[1]
    first = _ingest_batch(instance, box, warehouse, _drop(box / "haswell", "other.csv", ROWS[30:40]))[1]
    assert first.success  # nothing blocked

    path.write_bytes(saved)  # its bytes back: the sensor's work finds them unread, and they are ingested
    os.utime(path, (time.time() - 60,) * 2)
    todo, _ = pending(Inbox(path=str(box), settle_seconds=5), str(warehouse))
    assert list(todo) == [key]
    assert _ingest_batch(instance, box, warehouse, path)[1].success
    assert store.query("SELECT count(*) FROM usable_measurements", warehouse).item() == 40

    vanished = _drop(box / "haswell", "later.csv", ROWS[50:60])
    key = inbox.InboxFile(vanished, "haswell", "cycles_per_100").partition_key
    vanished.unlink()
    _ingest_batch(instance, box, warehouse, vanished, key=key)
    dropped = CliRunner().invoke(app, ["batches", "drop", key, "--warehouse", str(warehouse)])  # any state, either name
    assert dropped.exit_code == 0 and "0 measurements withdrawn" in dropped.stdout, dropped.output


def test_a_file_gone_back_to_bytes_its_rewrite_replaced_counts_them_again(tmp_path, warehouse):
    """A file rewritten (its new batch replaces the old) and then put back: the sensor
    asks for the old bytes' batch again and its run reads them, so the file's
    measurements are what it holds. A batch a user dropped is never asked for again."""
    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    path = _drop(box / "haswell", "hsw.csv", ROWS[:30])
    first, _ = _ingest_batch(instance, box, warehouse, path)
    path = _drop(box / "haswell", "hsw.csv", ROWS[30:60])
    second, result = _ingest_batch(instance, box, warehouse, path)
    assert result.success and "this batch replaces" in _materialized(result)["warning"].value
    verdict = measurement_sanity(warehouse, [first.rsplit("-", 1)[1]])
    assert verdict.passed and "1 replaced (not judged)" in verdict.description
    path = _drop(box / "haswell", "hsw.csv", ROWS[:30])
    at = path.stat().st_mtime
    todo, _ = pending(Inbox(path=str(box), settle_seconds=5), str(warehouse))
    assert list(todo) == [first]
    _, result = _ingest_batch(instance, box, warehouse, path)
    assert result.success and _materialized(result)["status"].value == "ok"
    usable = store.query("SELECT batch_id, count(*) FROM usable_measurements GROUP BY 1", warehouse).rows()
    assert usable == [(first.rsplit("-", 1)[1], 30)]
    _ingest_batch(instance, box, warehouse, _drop(box / "haswell", "hsw.csv", ROWS[30:60]))  # and once more,
    path = _drop(box / "haswell", "hsw.csv", ROWS[:30])
    os.utime(path, (at, at))  # put back as `cp -p` would, at the same time: a run of its own, not the last one's
    assert pending(Inbox(path=str(box), settle_seconds=5), str(warehouse))[0][first][1] != todo[first][1]
    with store.writer(warehouse) as con:
        batch_state.drop_batch(con, first.rsplit("-", 1)[1], "bad machine")
    assert not pending(Inbox(path=str(box), settle_seconds=5), str(warehouse))[0]


def _materialized(result) -> dict:
    return result.get_asset_materialization_events()[0].materialization.metadata


def test_ingest_without_the_daemon_and_partitions_from_the_warehouse(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from difftune_pipeline.cli import app

    box, warehouse = tmp_path / "inbox", tmp_path / "w.duckdb"
    monkeypatch.setenv("DIFFTUNE_INBOX", str(box))
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(warehouse))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    _drop(box / "haswell", "settled.csv", ROWS[:30])
    _drop(box / "skylake", "fresh.csv", SKYLAKE[:10], age=0)
    runner = CliRunner()
    result = runner.invoke(app, ["ingest"])
    assert result.exit_code == 0, result.output
    assert "inbox: skylake/fresh.csv: changed less than" in result.output
    assert store.query("SELECT count(*) FROM usable_measurements", warehouse).item() == 30
    assert runner.invoke(app, ["ingest"]).exit_code == 0  # again: nothing new
    assert store.query("SELECT count(*) FROM measurements", warehouse).item() == 30

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "other_home"))  # the same warehouse, another instance
    (tmp_path / "other_home").mkdir()
    assert runner.invoke(app, ["materialize", "--select", "key:blocks"]).exit_code == 0
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions(UARCHS.name) == ["haswell"]


def test_ingest_passes_over_a_batch_that_fails_its_sanity_check(tmp_path, monkeypatch):
    """A batch that fails its sanity check is settled and never feeds tuning: it is
    reported, and the files after it are still ingested in the same command."""
    from typer.testing import CliRunner

    from difftune_pipeline.cli import app

    box, warehouse = tmp_path / "inbox", tmp_path / "w.duckdb"
    monkeypatch.setenv("DIFFTUNE_INBOX", str(box))
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(warehouse))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    per_iteration = [f"{h},{float(c) / 100:g}" for h, c in (r.split(",") for r in ROWS[100:140])]
    for name, lines in (("a_good.csv", ROWS[:20]), ("b_wrong_unit.csv", per_iteration), ("c_good.csv", ROWS[20:40])):
        _drop(box / "haswell", name, lines)
    _drop(box / "haswell", "d_garbage.csv", ["garbage"])
    result = CliRunner().invoke(app, ["ingest"])
    assert result.exit_code == 0, result.output
    assert result.output.count("failed its sanity check, it never feeds tuning") == 2, result.output
    assert "instructions per cycle" in result.output and "no row became a measurement" in result.output
    statuses = store.query("SELECT source_file, status FROM batches ORDER BY source_file", warehouse).rows()
    assert [(Path(f).name, s) for f, s in statuses] == [
        ("a_good.csv", "ok"),
        ("b_wrong_unit.csv", "failed_sanity"),
        ("c_good.csv", "ok"),
        ("d_garbage.csv", "failed_sanity"),
    ]
    assert store.query("SELECT count(*) FROM usable_measurements", warehouse).item() == 40
    again = CliRunner().invoke(app, ["ingest"])  # settled: nothing is read again, nothing reported again
    assert again.exit_code == 0 and "sanity" not in again.output, again.output

    _drop(box / "haswell", "e_wrong_unit.csv", per_iteration[:30])  # and `materialize` goes on past one
    result = CliRunner().invoke(app, ["materialize", "--select", "key:measurement_batches or key:blocks"])
    assert result.exit_code == 0, result.output
    assert result.output.count("failed its sanity check, it never feeds tuning") == 1, result.output
    assert store.query("SELECT count(*) FROM batches WHERE status = 'failed_sanity'", warehouse).item() == 3
    with dg.DagsterInstance.get() as instance:  # the step after ingestion ran
        assert instance.get_latest_materialization_event(dg.AssetKey("blocks")) is not None


def test_the_sensor_asks_again_for_a_batch_whose_reader_died(tmp_path, warehouse):
    from difftune_pipeline.ingest import owner

    box, instance = tmp_path / "inbox", dg.DagsterInstance.ephemeral()
    path = _drop(box / "haswell", "b.csv", ROWS[:30])
    first = _sensor(instance, box)
    (request,) = first.run_requests
    assert isinstance(_sensor(instance, box, cursor=first.cursor), dg.SkipReason)  # asked once
    batch = request.partition_key.rsplit("-", 1)[1]
    with store.writer(warehouse) as con:  # its run began, and its process was killed mid-read
        con.execute(
            "INSERT INTO batches VALUES (?, 'measurements', 'haswell', NULL, ?, 0, 0, 0, now(), 'ingesting', NULL, "
            "now(), ?)",
            [batch, str(path), f"{owner.HOST} 999999999 dead"],
        )
    again = _sensor(instance, box, cursor=first.cursor)
    assert [r.partition_key for r in again.run_requests] == [request.partition_key]
    assert again.run_requests[0].run_key != request.run_key
    assert isinstance(_sensor(instance, box, cursor=again.cursor), dg.SkipReason)
    with store.writer(warehouse) as con:  # a live reader holds it: nothing to ask
        con.execute("UPDATE batches SET owner = ?", [f"{owner.HOST} {os.getppid()} live"])
    assert isinstance(_sensor(instance, box), dg.SkipReason)

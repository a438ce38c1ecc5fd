"""The Dagster UI: `difftune ui` serves the pipeline (sensor, schedule and
checks included), and the browser check takes its screenshots."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import screenshots
from difftune_pipeline import ui

ROOT = Path(__file__).resolve().parents[1]
QUERY = (
    "{ assetNodes { assetKey { path } groupName description } "
    "repositoriesOrError { ... on RepositoryConnection { nodes { sensors { name sensorState { status } } "
    "schedules { name scheduleState { status } } } } } }"
)


def _graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


@pytest.mark.slow
def test_ui_command_serves_the_pipeline(tmp_path):
    port = ui.free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "DIFFTUNE_WAREHOUSE": str(tmp_path / "w.duckdb")}
    cli = Path(sys.executable).parent / "difftune"
    process = subprocess.Popen(
        [str(cli), "ui", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    said = []
    try:
        deadline = time.monotonic() + 300
        for line in process.stdout:  # the command says when the pipeline is loaded
            said.append(line)
            if "the pipeline is loaded" in line or time.monotonic() > deadline:
                break
        ui.wait_until_loaded(url, 30, process)
        data = _graphql(url, QUERY)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output = "".join(said) + process.communicate(timeout=60)[0]
    nodes = {"/".join(n["assetKey"]["path"]): n for n in data["assetNodes"]}
    assert {"measurement_batches", "learned_params", "evaluation"} <= set(nodes)
    assert all(n["description"] and n["groupName"] in ("ingest", "difftune") for n in nodes.values())
    repo = data["repositoriesOrError"]["nodes"][0]
    assert {"inbox_sensor", "retune_automation", "dead_run_reaper"} <= {s["name"] for s in repo["sensors"]}
    assert {s["name"] for s in repo["schedules"]} == {"nightly_retune"}
    running = {
        s["name"]
        for s in repo["sensors"] + repo["schedules"]
        if (s.get("sensorState") or s.get("scheduleState"))["status"] == "RUNNING"
    }
    assert running == {"inbox_sensor", "retune_automation", "dead_run_reaper", "nightly_retune"}  # on without a click
    assert "the pipeline is loaded" in output
    assert (tmp_path / "home" / "dagster.yaml").exists()


@pytest.mark.browser
def test_screenshots_of_the_asset_graph_and_evaluation(tmp_path):
    env = {"DAGSTER_HOME": str(tmp_path / "home"), "DIFFTUNE_WAREHOUSE": str(tmp_path / "w.duckdb")}
    paths = screenshots(tmp_path / "shots", "--wait-ms", "8000", env=env)
    assert {p.name for p in paths} >= {"asset_graph.png", "evaluation_asset.png"}
    assert all(p.stat().st_size > 10_000 for p in paths)

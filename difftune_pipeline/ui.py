"""Starting the Dagster UI (webserver and daemon, ``dagster dev``) and waiting
until the code location has loaded, for ``difftune ui`` and the browser check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
LOCATION_QUERY = (
    "{ workspaceOrError { __typename ... on Workspace { locationEntries { name "
    "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(host: str, port: int) -> list[str]:
    """``dagster dev`` over the project's workspace (the location that ``dg`` knows)."""
    workspace = PROJECT / "workspace.yaml"
    if not workspace.exists():
        raise FileNotFoundError(f"{workspace} is missing: run from a checkout of difftune-pipeline")
    dagster = shutil.which("dagster", path=str(Path(sys.executable).parent)) or "dagster"
    return [dagster, "dev", "-w", str(workspace), "-h", host, "-p", str(port)]


def instance_home() -> Path:
    """The Dagster instance the commands use: ``DAGSTER_HOME``, else the project's
    ``.dagster_home/`` (set in the environment, as ``make`` does). A new one gets
    the project's instance settings (the writer pool, no telemetry)."""
    home = Path(os.environ.get("DAGSTER_HOME") or PROJECT / ".dagster_home").absolute()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(PROJECT / "dagster_instance.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def start(host: str = "127.0.0.1", port: int = 3000, log=None) -> subprocess.Popen:
    """``dagster dev`` on the instance of ``instance_home``."""
    env = {**os.environ, "DAGSTER_HOME": str(instance_home())}
    return subprocess.Popen(
        command(host, port), cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def location_status(url: str) -> dict[str, str]:
    """Code location name -> its state (``RepositoryLocation`` when loaded)."""
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": LOCATION_QUERY}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        data = json.load(response)["data"]["workspaceOrError"]
    out = {}
    for entry in data.get("locationEntries", []):
        state = entry["locationOrLoadError"]
        out[entry["name"]] = (
            "loading"
            if state is None
            else (state["__typename"] if state["__typename"] != "PythonError" else "error: " + state["message"])
        )
    return out


def wait_until_loaded(url: str, timeout: float = 180.0, process: subprocess.Popen | None = None) -> dict[str, str]:
    """Poll GraphQL until every code location is loaded; raise if one fails or time runs out."""
    deadline = time.monotonic() + timeout
    status: dict[str, str] = {}
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the UI exited with status {process.returncode}")
        try:
            status = location_status(url)
        except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError):
            status = {}
        if status and all(s == "RepositoryLocation" for s in status.values()):
            return status
        if any(s.startswith("error") for s in status.values()):
            raise RuntimeError(f"code location failed to load: {status}")
        time.sleep(1.0)
    raise TimeoutError(f"code location not loaded after {timeout:g} s: {status or 'server not answering'}")


def stop(process: subprocess.Popen) -> None:
    """Stop the webserver and daemon (the whole process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # dagster dev shuts its services down on SIGTERM
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

"""The environment a run reads, checked in one place before any work: a bad
variable is refused with one line naming it, its value and what it accepts,
instead of failing late inside a step (or, for Ray, hanging on a dead address).

The Dagster resources, ``difftune materialize`` and ``difftune ui`` all read
their settings through ``read``.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from difftune_pipeline import config

COMPUTES = ("threads", "ray")
# Settings fields that have a variable of their own.
SHORTCUTS = {"DIFFTUNE_SURROGATE": "surrogate_model", "DIFFTUNE_TUNER": "tuner", "DIFFTUNE_MODEL": "model"}


class SettingError(ValueError):
    """A variable of the environment that cannot be used; the message names it."""


def _refused(variable: str, value: str, accepted: str) -> SettingError:
    return SettingError(f"{variable}={value!r}: {accepted}")


@dataclass(frozen=True)
class Environment:
    """What the Dagster resources are built from."""

    profile: str
    overrides: dict[str, Any]  # dotted settings fields, DIFFTUNE_SETTINGS and the shortcuts together
    compute: str
    ray_workers: int


def read(env: Mapping[str, str] = os.environ, *, probe: bool = False) -> Environment:
    """Every variable checked (``probe``: also what lies outside this process: the
    folders a run writes, the torch device, a Ray cluster at ``RAY_ADDRESS``);
    ``SettingError`` on the first bad one."""
    profile = env.get("DIFFTUNE_PROFILE") or "sample"
    if profile not in config.PROFILES:
        raise _refused("DIFFTUNE_PROFILE", profile, f"one of {', '.join(sorted(config.PROFILES))}")
    text = env.get("DIFFTUNE_SETTINGS", "")
    try:
        overrides = config.parse_overrides(text)
        config.settings_for(profile, overrides)
    except ValueError as exc:
        raise _refused("DIFFTUNE_SETTINGS", text, f"a JSON object of settings fields: {exc}") from None
    for variable, name in SHORTCUTS.items():
        if env.get(variable):
            overrides[name] = env[variable]
            try:
                config.settings_for(profile, overrides)
            except ValueError as exc:
                raise _refused(variable, env[variable], str(exc)) from None
    halving = env.get("DIFFTUNE_SEARCH_HALVING", "")
    if halving not in ("", "0", "1"):
        raise _refused("DIFFTUNE_SEARCH_HALVING", halving, "1 to let the search halve a value, 0 or unset not to")
    if halving == "1":
        overrides["search.halving"] = True
    data_dir = env.get("DIFFTUNE_DATA_DIR") or None
    try:
        config.input_files(profile, data_dir)
    except (ValueError, OSError) as exc:
        raise _refused("DIFFTUNE_DATA_DIR", data_dir or "", f"the {profile} profile's data: {exc}") from None
    _lock_timeout(env.get("DIFFTUNE_LOCK_TIMEOUT", ""))
    compute = env.get("DIFFTUNE_COMPUTE") or "threads"
    if compute not in COMPUTES:
        raise _refused("DIFFTUNE_COMPUTE", compute, " or ".join(COMPUTES))
    workers = env.get("DIFFTUNE_RAY_WORKERS") or "0"
    if not re.fullmatch(r"[0-9]{1,6}", workers):
        raise _refused("DIFFTUNE_RAY_WORKERS", workers, "a number of workers, 0 for one per free CPU")
    simulations_root(env)
    query_sizes(env)
    if probe:
        writable_folders(env)
        torch_device(env.get("DIFFTUNE_TORCH_DEVICE", ""))
        if compute == "ray":
            probe_ray(env.get("RAY_ADDRESS", ""))
    return Environment(profile=profile, overrides=overrides, compute=compute, ray_workers=int(workers))


def _lock_timeout(value: str) -> float:
    from difftune_pipeline.warehouse.connection import lock_timeout

    try:
        return lock_timeout(value)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def torch_device(name: str):
    """The torch device a surrogate trains on; one that cannot hold data is refused."""
    from difftune_pipeline.surrogates.base import training_device

    try:
        return training_device(name)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def probe_ray(address: str) -> None:
    from difftune_pipeline.engine.ray_engine import probe

    try:
        probe(address)
    except ConnectionError as exc:
        raise SettingError(str(exc)) from None


def warehouse_path(env: Mapping[str, str] = os.environ) -> Path:
    from difftune_pipeline.warehouse import DEFAULT_PATH

    return Path(env.get("DIFFTUNE_WAREHOUSE") or DEFAULT_PATH)


def simulations_root(env: Mapping[str, str] = os.environ) -> str:
    """Where simulated chunks are written: ``DIFFTUNE_SIMULATIONS`` (a folder, or a URI
    pyarrow's filesystems open: ``s3://bucket/prefix``…), else beside the warehouse ("")."""
    root = env.get("DIFFTUNE_SIMULATIONS", "")
    if root:
        from difftune_pipeline.warehouse.simulation_files import filesystem

        try:
            filesystem(root)
        except (ValueError, OSError, ImportError) as exc:
            raise _refused(
                "DIFFTUNE_SIMULATIONS",
                root,
                f"a folder or a URI pyarrow opens (s3://, gs://, hdfs://): {str(exc).splitlines()[0]}",
            ) from None
    return root


def writable_folders(env: Mapping[str, str] = os.environ) -> None:
    """The folders a run writes (the warehouse's, the inbox, and the simulations' when
    they are a local folder) are folders this process can write, made when missing,
    before any work: else ``SettingError`` naming the variable and why."""
    warehouse = warehouse_path(env).parent
    folders = [("DIFFTUNE_WAREHOUSE", warehouse), ("DIFFTUNE_INBOX", inbox_path(env))]
    root = simulations_root(env)
    if "://" not in root:
        folders.append(("DIFFTUNE_SIMULATIONS", Path(root) if root else warehouse / "simulations"))
    for variable, folder in folders:
        try:
            if folder.exists() and not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "it is a file")
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            value = env.get(variable, "")
            where = f"{folder}" + ("" if value else f" (where {variable} is unset)")
            accepted = f"{where} must be a folder this process can write: {exc.strerror or exc}"
            raise _refused(variable, value, accepted) from None


def inbox_path(env: Mapping[str, str] = os.environ) -> Path:
    """Where new measurement batches are dropped: ``DIFFTUNE_INBOX``, else ``warehouse/inbox``."""
    from difftune_pipeline.warehouse import DEFAULT_PATH

    return Path(env.get("DIFFTUNE_INBOX") or DEFAULT_PATH.parent / "inbox")


def query_sizes(env: Mapping[str, str] = os.environ, memory: str | None = None, temp: str | None = None):
    """(memory, temporary disk) a user's query may take: ``memory``/``temp`` (a command's
    options), else ``DIFFTUNE_QUERY_MEMORY``/``DIFFTUNE_QUERY_TEMP``, else the defaults."""
    from difftune_pipeline.warehouse.connection import parse_size
    from difftune_pipeline.warehouse.user_query import DEFAULT_QUERY_MEMORY, DEFAULT_QUERY_TEMP

    out = []
    for given, variable, option, default in (
        (memory, "DIFFTUNE_QUERY_MEMORY", "--memory-limit", DEFAULT_QUERY_MEMORY),
        (temp, "DIFFTUNE_QUERY_TEMP", "--temp-limit", DEFAULT_QUERY_TEMP),
    ):
        value = given or env.get(variable) or default
        try:
            parse_size(value)
        except ValueError:
            raise _refused(
                option if given else variable, value, f"a size such as 2GB or 512MiB (default {default})"
            ) from None
        out.append(value.strip())
    return tuple(out)

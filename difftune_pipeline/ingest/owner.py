"""Who is reading a batch: a token naming this host, this process and one ingestion.
A batch is ``ingesting`` under its reader's token, and every chunk its reader commits
checks that the token is still the batch's. So one left by a process that died is
read again from nothing, one that another live process reads is left to it, and a
reader whose batch was dropped or taken over stops."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import datetime

HOST = socket.gethostname()
# Seconds without a committed chunk after which an ingesting batch counts as abandoned,
# whoever holds it (a live reader commits a chunk every second or two).
ABANDONED_SECONDS = 600.0
_ACTIVE: set[str] = set()  # the tokens of this process's ingestions in progress


@contextlib.contextmanager
def reading() -> Iterator[str]:
    """A token for one ingestion, held while it runs."""
    token = f"{HOST} {os.getpid()} {uuid.uuid4().hex[:12]}"
    _ACTIVE.add(token)
    try:
        yield token
    finally:
        _ACTIVE.discard(token)


def abandoned(token: str | None, last: datetime | None, now: datetime) -> bool:
    """Whether the reader holding a batch is gone: no token, a process of this host that
    is dead (or this process, no longer reading it), or no chunk for ``ABANDONED_SECONDS``."""
    if token is None or last is None or (now - last).total_seconds() > ABANDONED_SECONDS:
        return True
    host, pid, _ = token.rsplit(" ", 2)
    if host != HOST:
        return False
    if int(pid) == os.getpid():
        return token not in _ACTIVE
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def describe(token: str) -> str:
    host, pid, _ = token.rsplit(" ", 2)
    return f"process {pid} on {host}"

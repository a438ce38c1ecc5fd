"""A batch file read once, front to back, in blocks: its numbered lines come in
chunks of bounded size, and the bytes read are hashed as they go by. So the rows
ingested are exactly the bytes hashed, memory stays flat in the file's size, and a
file rewritten while it is read is caught (its bytes no longer hash to the batch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

BLOCK = 4 << 20  # bytes read at a time: one chunk of lines (~70k BHive rows)
BOM = b"\xef\xbb\xbf"


class FileChanged(OSError):
    """The file's bytes changed between hashing and reading it: the batch is ``changed``."""

    status = "changed"


class FileGone(FileChanged):
    """The file was gone when it was to be read: the batch is ``vanished``."""

    status = "vanished"


MAX_LINE = 1 << 20  # a line longer than this (a file without newlines) is cut, so memory stays bounded


def batch_digest(scope: str):
    """The running hash a batch id is cut from: the scope, then the file's bytes."""
    return hashlib.sha256(scope.encode() + b"\0")


def batch_id_of(digest) -> str:
    return digest.hexdigest()[:16]


class NumberedLines:
    """``chunks()`` yields lists of (line number, text) of the non-blank lines; after
    the last, ``batch_id`` is the hash of every byte read. Only ``\\n`` ends a line
    (a stray ``\\r`` is data; a trailing one is not), a leading byte-order mark is
    not data, bytes that are not UTF-8 become U+FFFD (the line is then quarantined
    with its text as read), and a line longer than ``MAX_LINE`` is cut there."""

    def __init__(self, path: str | Path, scope: str, block: int | None = None):
        self.path = Path(path)
        self.block = block or BLOCK
        self._digest = batch_digest(scope)
        self.n_lines = 0  # numbered lines so far, blank ones included
        self.n_bytes = 0
        self._done = False

    @property
    def batch_id(self) -> str:
        if not self._done:
            raise RuntimeError("the file has not been read to its end yet")
        return batch_id_of(self._digest)

    def chunks(self) -> Iterator[list[tuple[int, str]]]:
        """Chunks of numbered non-blank lines (a chunk of blank lines is not yielded);
        ``FileGone`` when the file is not there to read."""
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            raise FileGone(f"{self.path} vanished before it was read: nothing of it was kept") from None
        tail = b""
        with fh:
            first = True
            while data := fh.read(self.block):
                self._digest.update(data)
                self.n_bytes += len(data)
                if first:
                    data, first = data.removeprefix(BOM), False
                data = tail + data
                cut = data.rfind(b"\n") + 1 or (len(data) + 1 if len(data) > MAX_LINE else 0)
                data, tail = data[:cut], data[cut:]
                if data and (lines := self._numbered(data[:-1] if data.endswith(b"\n") else data)):
                    yield lines
            if tail and (lines := self._numbered(tail)):
                yield lines
        self._done = True

    def _numbered(self, data: bytes) -> list[tuple[int, str]]:
        lines = data.decode("utf-8", errors="replace").split("\n")
        start = self.n_lines + 1
        self.n_lines += len(lines)
        return [(n, line.rstrip("\r")) for n, line in enumerate(lines, start=start) if line.strip()]

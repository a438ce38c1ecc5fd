"""Output capture at the file-descriptor level: while a command's runs go, what
they write (Dagster's log, warnings, what Ray and LLVM print) lands in a log
file, and optionally on the terminal too."""

from __future__ import annotations

import atexit
import codecs
import contextlib
import os
import sys
import threading
from pathlib import Path


@contextlib.contextmanager
def captured(path: Path, verbose: bool):
    """While the runs go, everything written to stdout and stderr (Dagster's log,
    warnings, what Ray and LLVM print, at the file-descriptor level) lands in
    ``path``, and with ``verbose`` on the terminal too. Yields the terminal's
    stream, for progress and results."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    terminal, own_terminal = _terminal()
    log = open(path, "ab", buffering=0)
    copier = None
    if verbose:
        read_end, target = os.pipe()
        copier = threading.Thread(target=_tee, args=(read_end, log, terminal), daemon=True)
        copier.start()
    else:
        target = log.fileno()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    previous = sys.stdout, sys.stderr
    stream = open(os.dup(target), "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        for fd in (1, 2):
            os.dup2(target, fd)
        sys.stdout = sys.stderr = stream
        yield terminal
    finally:
        with contextlib.suppress(OSError):
            stream.flush()
        sys.stdout, sys.stderr = previous
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        with contextlib.suppress(OSError):  # a log on a full disk loses its tail, not the run's outcome
            stream.close()
        if copier is not None:
            os.close(target)
            copier.join(timeout=5)  # processes that inherited the pipe (Ray's) may hold it open longer
        else:
            with contextlib.suppress(OSError):
                log.close()
        terminal.flush()
        if own_terminal and copier is not None and copier.is_alive():
            atexit.register(terminal.close)  # the copier writes on while Ray's processes hold the pipe
        elif own_terminal:
            terminal.close()


def _terminal():
    """(stream, whether it is ours to close): where the user sees output, a copy of the
    real stderr (its descriptor is about to point at the log), or the stream that
    stands in for it (in tests)."""
    try:
        if sys.stderr.fileno() == 2:
            return open(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace"), True
    except (AttributeError, OSError, ValueError):
        pass
    return sys.stderr, False


def _tee(read_end: int, log, terminal) -> None:
    """Copy what the runs write to the log file and the terminal until every writer
    closed the pipe. A sink that fails (a full disk, a closed terminal) is dropped;
    the pipe is still drained, so a writer never blocks or breaks on it."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two chunks
    sinks = {"log": log, "terminal": terminal}
    with open(read_end, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            text = decoder.decode(chunk)
            for name, sink in list(sinks.items()):
                try:
                    if name == "log":
                        sink.write(chunk)
                    else:
                        sink.write(text)
                        sink.flush()
                except (OSError, ValueError):
                    del sinks[name]
    with contextlib.suppress(OSError):
        log.close()

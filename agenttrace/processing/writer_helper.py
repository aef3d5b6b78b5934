"""The helper process's side of :mod:`agenttrace.processing.writer_process`.

The helper is started with ``python -E -c ...`` and runs :func:`serve`: it reads requests
from its stdin (open, write, flush, flush_export, close), runs an
:class:`~agenttrace.processing.writer.EpisodeWriter` per writer id, and answers on its stdout
with the writer's state. Its log records go back to the parent's ``agenttrace`` logger.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import warnings
from collections.abc import Callable
from typing import Any

from agenttrace.processing.metrics import EpisodeSummary
from agenttrace.processing.writer import EpisodeWriter
from agenttrace.processing.writer_process import from_wire, read_frame, send_frame


class _ForwardLogs(logging.Handler):
    def __init__(self, send: Callable[[Any], None]) -> None:
        super().__init__(logging.DEBUG)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self._send(("log", 0, (record.levelno, text)))
        except Exception:
            self.handleError(record)


def serve() -> None:
    """The helper's main loop: read requests until the parent closes its end of the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent; we finish files
    # (started from an agenttrace thread, it inherited a mask that blocks SIGTERM: undo it)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the reply pipe
    requests = os.fdopen(0, "rb", buffering=0)
    send_lock = threading.Lock()

    gone = []  # non-empty once the parent stopped reading (it was killed): keep writing

    def send(message: Any) -> None:
        if gone:
            return
        with send_lock:
            try:
                send_frame(replies, message)
            except OSError:
                gone.append(True)

    agenttrace_logger = logging.getLogger("agenttrace")
    agenttrace_logger.addHandler(_ForwardLogs(send))
    agenttrace_logger.setLevel(logging.DEBUG)
    agenttrace_logger.propagate = False
    warnings.showwarning = lambda message, category, *args, **kwargs: send(
        ("log", 0, (logging.WARNING, f"{category.__name__}: {message}"))
    )

    writers: dict[int, EpisodeWriter] = {}
    pending: dict[int, list[EpisodeSummary]] = {}  # summaries not yet sent, by writer
    done: dict[int, int] = {}  # items written, by writer
    while True:
        message = read_frame(requests)
        if message is None:
            break
        operation, writer_id, payload = message
        try:
            _handle(operation, writer_id, payload, writers, pending, done, send)
        except Exception:
            agenttrace_logger.exception("agenttrace: the writer process failed at %s", operation)
    for writer in writers.values():  # the parent went away: finish what we have
        writer.close()


def _state(writer: EpisodeWriter, items: int, summaries: list[EpisodeSummary]) -> dict[str, Any]:
    """What a reply tells the parent: the writer's report, how many items it has written and
    where its span file and commit sink end after them, and the summaries not yet sent."""
    state = {
        "report": writer.report(),
        "items": items,
        "positions": writer.positions(),
        "summaries": summaries[:],
    }
    summaries.clear()
    return state


def _handle(
    operation: str,
    writer_id: int,
    payload: Any,
    writers: dict[int, EpisodeWriter],
    pending: dict[int, list[EpisodeSummary]],
    done: dict[int, int],
    send: Callable[[Any], None],
) -> None:
    if operation == "open":
        summaries = pending[writer_id] = []
        done[writer_id] = 0
        try:
            writer = writers[writer_id] = EpisodeWriter.from_spec(
                payload, on_summary=summaries.append if payload.summaries else None
            )
        except Exception as exc:
            send(("opened", writer_id, (f"{type(exc).__name__}: {exc}", None)))
        else:
            send(("opened", writer_id, (None, _state(writer, 0, summaries))))
        return
    writer = writers[writer_id]
    if operation == "write":
        try:
            writer.write(from_wire(payload))
        finally:
            done[writer_id] += len(payload)
    elif operation == "flush":
        writer.flush()
    elif operation == "flush_export":
        flushed = writer.flush_export(payload)
        state = _state(writer, done[writer_id], pending[writer_id])
        send(("export_flushed", writer_id, (flushed, state)))
        return
    elif operation == "close":
        del writers[writer_id]
        writer.close(payload)
    state = _state(writer, done[writer_id], pending[writer_id])
    if operation == "close":
        del pending[writer_id], done[writer_id]
    reply = {"write": "progress", "flush": "flushed", "close": "closed"}[operation]
    send((reply, writer_id, state))

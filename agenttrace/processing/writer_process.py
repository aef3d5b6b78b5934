"""Running the writer in a helper process, so rebuilding and file writing use another core.

In CPython a writer *thread* competes with the RL loop for the GIL: every microsecond spent
encoding spans, rebuilding trajectories and writing JSONL/Parquet slows the loop down. Here
the processor's background thread only serializes each batch of finished episodes (marshal,
about a microsecond per span) and writes it to a pipe; a helper process runs the
:class:`~agenttrace.processing.writer.EpisodeWriter`.

One helper serves every pipeline of a process (reconfiguring does not start another). It is
started with ``sys.executable -E -c ...`` (not ``multiprocessing``, which would re-import the
user's main module) and told the parent's ``sys.path``. It ignores Ctrl-C, so an interrupted
run still gets its files finished at exit, and it closes its files and exits when the parent
goes away (end of input). Its log records come back to the parent's ``agenttrace`` logger.

If the helper dies, the writers switch to writing in this process; episodes and spans it had
been sent but had not confirmed are counted as lost (``*_lost_writer_crash``).

Messages are ``(operation, writer id, payload)`` tuples, marshalled (pickled if they hold
other objects), each framed by an 8-byte length. Parent to helper: open, write, flush,
close. Helper to parent: opened, progress (after every write batch), flushed, closed, log,
and summaries (episode summaries for the metrics, which are recorded in the parent, where
the MeterProvider is; sent before the progress or flush reply they belong to).
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import marshal
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, BinaryIO

from agenttrace.processing.metrics import EpisodeSummary
from agenttrace.processing.writer import (
    EpisodeWriter,
    FinishedEpisode,
    WriterSpec,
    empty_report,
    merge_reports,
    sampled_count,
)
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord

logger = logging.getLogger("agenttrace")

_HEADER = struct.Struct("!Q")
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_BOOT = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
    "from agenttrace.processing.writer_process import serve; serve()"
)


class HelperUnavailable(RuntimeError):
    """The helper process could not be started or has gone away."""


def _send_frame(stream: BinaryIO, message: Any) -> None:
    try:
        data = b"m" + marshal.dumps(message)  # plain data: several times faster than pickle
    except ValueError:  # an object marshal does not know (e.g. a Path in a spec)
        data = b"p" + pickle.dumps(message, _PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:  # an unbuffered pipe may take less than asked
        view = view[stream.write(view) :]


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            return None
        got += n
    return bytes(buffer)


def _read_frame(stream: BinaryIO) -> Any | None:
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    data = _read_exactly(stream, _HEADER.unpack(header)[0])
    if data is None:
        return None
    return marshal.loads(data[1:]) if data[:1] == b"m" else pickle.loads(data[1:])


def _to_wire(items: list[FinishedEpisode | list[SpanRecord]]) -> list[Any]:
    """Items as plain tuples and lists (marshal takes no named tuples)."""
    wire: list[Any] = []
    for item in items:
        if type(item) is list:
            wire.append([_record_to_wire(r) for r in item])
        else:
            episode_id, records, start, root_span_id, dropped = item  # type: ignore[misc]
            wire.append(
                (
                    episode_id,
                    [_record_to_wire(r) for r in records],
                    None if start is None else _record_to_wire(start),
                    root_span_id,
                    dropped,
                )
            )
    return wire


def _from_wire(wire: list[Any]) -> list[FinishedEpisode | list[SpanRecord]]:
    items: list[FinishedEpisode | list[SpanRecord]] = []
    for item in wire:
        if type(item) is list:
            items.append([_record_from_wire(r) for r in item])
        else:
            episode_id, records, start, root_span_id, dropped = item
            items.append(
                FinishedEpisode(
                    episode_id,
                    [_record_from_wire(r) for r in records],
                    None if start is None else _record_from_wire(start),
                    root_span_id,
                    dropped,
                )
            )
    return items


_EVENTS, _LINKS = SpanRecord._fields.index("events"), SpanRecord._fields.index("links")
_make_record = SpanRecord._make


def _record_to_wire(record: SpanRecord) -> tuple[Any, ...]:
    if not record.events and not record.links:
        return tuple(record)
    fields = list(record)
    fields[_EVENTS] = tuple(tuple(event) for event in record.events)
    fields[_LINKS] = tuple(tuple(link) for link in record.links)
    return tuple(fields)


def _record_from_wire(fields: tuple[Any, ...]) -> SpanRecord:
    record = _make_record(fields)
    if not record.events and not record.links:
        return record
    return record._replace(
        events=tuple(SpanEvent._make(event) for event in record.events),
        links=tuple(SpanLink._make(link) for link in record.links),
    )


# --- parent side ------------------------------------------------------------------------------


class _Helper:
    """The running helper process, its pipes and the thread that reads its replies."""

    def __init__(self) -> None:
        executable = sys.executable
        if not executable or not os.path.exists(executable):
            raise HelperUnavailable(f"no Python executable to start ({executable!r})")
        paths = [p for p in sys.path if isinstance(p, str)]
        try:
            self.process = subprocess.Popen(
                [executable, "-E", "-c", _BOOT, json.dumps(paths)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                close_fds=True,
            )
        except OSError as exc:
            raise HelperUnavailable(f"could not start {executable}: {exc}") from exc
        self.pid = os.getpid()
        self.alive = True
        self._send_lock = threading.Lock()
        self._writers: dict[int, RemoteWriter] = {}
        self._ids = itertools.count(1)
        self._reader = threading.Thread(
            target=self._read_replies, name="agenttrace-writer-replies", daemon=True
        )
        self._reader.start()
        atexit.register(self.stop)

    def stop(self, timeout: float = 30.0) -> None:
        """At exit: end its input, so it finishes every file, and wait for it."""
        if self.pid != os.getpid():
            return
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            logger.warning("agenttrace: the writer process did not finish in %.0f s", timeout)

    def register(self, writer: RemoteWriter) -> int:
        writer_id = next(self._ids)
        self._writers[writer_id] = writer
        return writer_id

    def unregister(self, writer_id: int) -> None:
        self._writers.pop(writer_id, None)

    def send(self, message: tuple[str, int, Any]) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            with self._send_lock:
                _send_frame(stdin, message)
        except (OSError, ValueError) as exc:  # broken pipe, or closed after a crash
            self._died()
            raise HelperUnavailable(str(exc)) from exc

    def _read_replies(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                message = _read_frame(stdout)
                if message is None:
                    break
                operation, writer_id, payload = message
                if operation == "log":
                    level, text = payload
                    logger.log(level, "%s", text)
                    continue
                writer = self._writers.get(writer_id)
                if writer is not None:
                    writer._reply(operation, payload)
        except Exception:
            logger.exception("agenttrace: bad reply from the writer process")
        finally:
            self._died()
            stdout.close()

    def _died(self) -> None:
        if not self.alive:
            return
        self.alive = False
        code = self.process.poll()
        for writer in list(self._writers.values()):
            writer._helper_gone(code)

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pipes without writing to them."""
        self.alive = False
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()  # unbuffered: closing flushes nothing into the pipe
            except OSError:
                pass


_helper: _Helper | None = None
_helper_lock = threading.Lock()


def _shared_helper() -> _Helper:
    global _helper
    with _helper_lock:
        if _helper is None or not _helper.alive or _helper.pid != os.getpid():
            _helper = _Helper()
        return _helper


def _after_fork_in_child() -> None:
    global _helper
    if _helper is not None:
        _helper.forget_after_fork()
        _helper = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RemoteWriter:
    """An :class:`EpisodeWriter` in the helper process, with the same methods.

    Called from the processor's one background thread; ``report`` from any thread. When the
    helper cannot start or dies, a local EpisodeWriter built from the same spec takes over.
    """

    def __init__(
        self,
        spec: WriterSpec,
        *,
        open_timeout: float = 60.0,
        on_summary: Callable[[EpisodeSummary], None] | None = None,
    ) -> None:
        self._spec = spec._replace(summaries=on_summary is not None)
        self._on_summary = on_summary
        self._open_timeout = open_timeout
        self._local: EpisodeWriter | None = None
        self._remote_report = empty_report()
        self._lost = {"episodes": 0, "spans": 0}
        self._sent = {"episodes": 0, "spans": 0}
        self._replies: dict[str, threading.Event] = {}
        self._open_error: str | None = None
        self._exit_code: int | None = None
        self._gone = threading.Event()
        self._closed = False
        self._connect()

    @property
    def writes_spans(self) -> bool:
        return self._spec.span_file is not None

    @property
    def in_helper_process(self) -> bool:
        return self._local is None

    # --- connection -----------------------------------------------------------------------

    def _connect(self) -> None:
        self._gone.clear()
        self._pid = os.getpid()
        try:
            self._helper = _shared_helper()
            self._id = self._helper.register(self)
            self._request("open", self._spec, self._open_timeout)
            error = self._open_error
        except HelperUnavailable as exc:
            error = f"the writer process is not available ({exc})"
        if error is not None:
            self._go_local(f"could not open the writer in a helper process: {error}")

    def _request(self, operation: str, payload: Any, timeout: float | None) -> None:
        """Send a message and wait for its reply; raises HelperUnavailable if none comes."""
        event = self._replies[_REPLY_TO[operation]] = threading.Event()
        self._helper.send((operation, self._id, payload))
        if not event.wait(timeout) or self._gone.is_set():
            raise HelperUnavailable(f"no reply to {operation!r} from the writer process")

    def _reply(self, operation: str, payload: Any) -> None:
        """Called on the reply thread: episode summaries, an error text for "opened", else
        the writer's report."""
        if operation == "summaries":
            if self._on_summary is not None:
                for summary in payload:
                    self._on_summary(summary)
            return
        if operation == "opened":
            self._open_error = payload
        else:
            self._remote_report = payload
        event = self._replies.get(operation)
        if event is not None:
            event.set()

    def _helper_gone(self, exit_code: int | None) -> None:
        """Called by the helper (reply thread or a failed send) when the process is gone."""
        self._exit_code = exit_code
        self._gone.set()
        for event in list(self._replies.values()):
            event.set()

    def _go_local(self, reason: str) -> None:
        # A sink that cannot open raises here.
        local = EpisodeWriter.from_spec(self._spec, on_summary=self._on_summary)
        lost_episodes = max(0, self._sent["episodes"] - self._remote_report["episodes_done"])
        lost_spans = max(0, self._sent["spans"] - self._remote_report["spans_done"])
        self._lost["episodes"] += lost_episodes
        self._lost["spans"] += lost_spans
        if self._sent["episodes"] or self._sent["spans"]:
            logger.error(
                "agenttrace: %s; writing in this process from now on. %d episode(s) and "
                "%d span(s) sent to it were not confirmed written and are counted as lost",
                reason,
                lost_episodes,
                lost_spans,
            )
        else:
            logger.warning("agenttrace: %s; writing in this process instead", reason)
        self._local = local

    def _usable_remote(self) -> bool:
        if self._local is not None:
            return False
        if self._pid != os.getpid():  # forked: the parent's helper is not ours
            self._remote_report = empty_report()
            self._sent = {"episodes": 0, "spans": 0}
            self._connect()
            return self._local is None
        if self._gone.is_set():
            self._go_local(f"the writer process exited unexpectedly (exit code {self._exit_code})")
            return False
        return True

    # --- the EpisodeWriter interface ------------------------------------------------------

    def write(self, items: list[FinishedEpisode | list[SpanRecord]]) -> None:
        if self._usable_remote():
            episodes = spans = 0
            for item in items:
                if type(item) is list:
                    spans += sampled_count(item)
                else:
                    episodes += 1
                    spans += sampled_count(item.records)  # type: ignore[union-attr]
            try:
                self._helper.send(("write", self._id, _to_wire(items)))
                self._sent["episodes"] += episodes
                self._sent["spans"] += spans
                return
            except HelperUnavailable:
                self._usable_remote()  # switches to local; these items were not sent
        assert self._local is not None
        self._local.write(items)

    def flush(self, timeout: float | None = 60.0) -> None:
        if self._usable_remote():
            try:
                self._request("flush", None, timeout)
                return
            except HelperUnavailable:
                if not self._usable_remote():
                    assert self._local is not None
                    self._local.flush()
                return
        assert self._local is not None
        self._local.flush()

    def close(self, timeout: float | None = 60.0) -> None:
        if self._closed:
            return
        self._closed = True
        if self._usable_remote():
            try:
                self._request("close", None, timeout)
                self._helper.unregister(self._id)
                return
            except HelperUnavailable:
                if self._usable_remote():
                    return  # timed out: the helper finishes the files when it gets to them
        assert self._local is not None
        self._local.close()

    def report(self) -> dict[str, Any]:
        report = dict(self._remote_report)
        if self._local is not None:
            report = merge_reports(report, self._local.report())
        report["episodes_lost_writer_crash"] = self._lost["episodes"]
        report["spans_lost_writer_crash"] = self._lost["spans"]
        return report


_REPLY_TO = {"open": "opened", "flush": "flushed", "close": "closed"}


# --- helper side ------------------------------------------------------------------------------


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
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the reply pipe
    requests = os.fdopen(0, "rb", buffering=0)
    send_lock = threading.Lock()

    def send(message: Any) -> None:
        with send_lock:
            _send_frame(replies, message)

    agenttrace_logger = logging.getLogger("agenttrace")
    agenttrace_logger.addHandler(_ForwardLogs(send))
    agenttrace_logger.setLevel(logging.DEBUG)
    agenttrace_logger.propagate = False
    warnings.showwarning = lambda message, category, *args, **kwargs: send(
        ("log", 0, (logging.WARNING, f"{category.__name__}: {message}"))
    )

    writers: dict[int, EpisodeWriter] = {}
    pending: dict[int, list[EpisodeSummary]] = {}  # summaries not yet sent, by writer
    while True:
        message = _read_frame(requests)
        if message is None:
            break
        operation, writer_id, payload = message
        try:
            _handle(operation, writer_id, payload, writers, pending, send)
        except Exception:
            agenttrace_logger.exception("agenttrace: the writer process failed at %s", operation)
    for writer in writers.values():  # the parent went away: finish what we have
        writer.close()


def _handle(
    operation: str,
    writer_id: int,
    payload: Any,
    writers: dict[int, EpisodeWriter],
    pending: dict[int, list[EpisodeSummary]],
    send: Callable[[Any], None],
) -> None:
    if operation == "open":
        summaries = pending[writer_id] = []
        try:
            writers[writer_id] = EpisodeWriter.from_spec(
                payload, on_summary=summaries.append if payload.summaries else None
            )
        except Exception as exc:
            send(("opened", writer_id, f"{type(exc).__name__}: {exc}"))
        else:
            send(("opened", writer_id, None))
        return
    writer = writers[writer_id]
    if operation == "write":
        writer.write(_from_wire(payload))
    elif operation == "flush":
        writer.flush()
    elif operation == "close":
        del writers[writer_id]
        writer.close()
    summaries = pending[writer_id]
    if summaries:
        send(("summaries", writer_id, summaries[:]))
        summaries.clear()
    if operation == "close":
        del pending[writer_id]
    reply = {"write": "progress", "flush": "flushed", "close": "closed"}[operation]
    send((reply, writer_id, writer.report()))

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

If the helper dies, the writers switch to writing in this process. Every reply of the helper
says how many of the items (episodes and span-only batches) it was sent it has written, and
where its span file and commit sink (the JSONL sink written last) then ended. The parent
keeps the items it sent until they are confirmed (their records up to
:data:`MAX_RETAINED_SPANS` spans; only their ids beyond that). On a crash it reads what the
helper wrote after the last confirmed position: an unconfirmed episode whose line is in the
commit sink's file was written (and is counted so); the others are written here from the
kept records, without their span line when that is already in the span file. Only items
whose records were not kept and that are not in the files are counted as lost
(``*_lost_writer_crash``). So no episode is counted written that is not in the file, none
that is in it is counted lost, and none is written twice.

Messages are ``(operation, writer id, payload)`` tuples, marshalled (pickled if they hold
other objects), each framed by an 8-byte length. Parent to helper: open, write, flush,
flush_export (with a timeout), close (with the time the network may take). Helper to
parent: opened, progress (after every write batch), flushed, export_flushed, closed and log.
The replies carry the writer's state: its report (with the span export's counters), the
items written, the file positions and the episode summaries for the metrics (recorded in the
parent, where the MeterProvider is).

With a span export, the helper also sends the span records to the OTLP endpoint
(:mod:`agenttrace.processing.record_export`): a slow or dead endpoint holds records here,
not in the program. Spans it had queued when it died are not sent (the span file has them).
"""

from __future__ import annotations

import atexit
import collections
import itertools
import json
import logging
import marshal
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from agenttrace import semconv as sc
from agenttrace._threads import start_daemon
from agenttrace.processing.metrics import EpisodeSummary, summarize
from agenttrace.processing.writer import (
    EpisodeSpans,
    EpisodeWriter,
    FinishedEpisode,
    WriterItem,
    WriterSpec,
    empty_report,
    lines_since,
    merge_reports,
)
from agenttrace.sinks.jsonl import JsonlSink
from agenttrace.storage.otlp_json_lines import iter_records
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import (
    SpanEvent,
    SpanLink,
    SpanRecord,
    split_vector_steps,
)

logger = logging.getLogger("agenttrace")

#: Spans whose records the parent keeps for items sent to the helper and not yet confirmed,
#: to write them itself if the helper dies. The pipe bounds what is unconfirmed to about two
#: batches, so this is seldom reached; beyond it the oldest items keep only their ids, and
#: those the helper had not written when it died are counted lost.
MAX_RETAINED_SPANS = 100_000

_HEADER = struct.Struct("!Q")
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_BOOT = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
    "from agenttrace.processing.writer_helper import serve; serve()"
)


class HelperUnavailable(RuntimeError):
    """The helper process could not be started or has gone away."""


def send_frame(stream: BinaryIO, message: Any) -> None:
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


def read_frame(stream: BinaryIO) -> Any | None:
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    data = _read_exactly(stream, _HEADER.unpack(header)[0])
    if data is None:
        return None
    return marshal.loads(data[1:]) if data[:1] == b"m" else pickle.loads(data[1:])


def to_wire(items: list[WriterItem]) -> list[Any]:
    """Items as plain tuples and lists (marshal takes no named tuples): a list for spans
    outside episodes, a pair for an open episode's spans, a 5-tuple for a finished one."""
    wire: list[Any] = []
    for item in items:
        if type(item) is list:
            wire.append([_record_to_wire(r) for r in item])
        elif type(item) is EpisodeSpans:
            wire.append((item.episode_id, [_record_to_wire(r) for r in item.records]))
        else:
            episode_id, records, start, root_span_id, streamed = item  # type: ignore[misc]
            wire.append(
                (
                    episode_id,
                    [_record_to_wire(r) for r in records],
                    None if start is None else _record_to_wire(start),
                    root_span_id,
                    streamed,
                )
            )
    return wire


def from_wire(wire: list[Any]) -> list[WriterItem]:
    items: list[WriterItem] = []
    for item in wire:
        if type(item) is list:
            items.append([_record_from_wire(r) for r in item])
        elif len(item) == 2:
            episode_id, records = item
            items.append(EpisodeSpans(episode_id, [_record_from_wire(r) for r in records]))
        else:
            episode_id, records, start, root_span_id, streamed = item
            items.append(
                FinishedEpisode(
                    episode_id,
                    [_record_from_wire(r) for r in records],
                    None if start is None else _record_from_wire(start),
                    root_span_id,
                    streamed,
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
        self._reader = start_daemon(self._read_replies, "agenttrace-writer-replies")
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
                send_frame(stdin, message)
        except (OSError, ValueError) as exc:  # broken pipe, or closed after a crash
            self._died()
            raise HelperUnavailable(str(exc)) from exc

    def _read_replies(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                message = read_frame(stdout)
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

    def wait_gone(self, timeout: float = 10.0) -> None:
        """Make sure the process has ended (killing it if it still runs: it must not write
        the files this process now writes) and that every reply it sent has been handled."""
        if self.pid != os.getpid():
            return
        try:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            logger.warning("agenttrace: the writer process did not end in %.0f s", timeout)
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout)

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
        for writer in _helper._writers.values():  # the reply thread may have held it
            writer._state_lock = threading.Lock()
        _helper.forget_after_fork()
        _helper = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Sent:
    """An item sent to the helper and not yet confirmed written."""

    __slots__ = ("episode_id", "finished", "item", "key", "sampled", "size")

    def __init__(self, item: WriterItem, writes_spans: bool) -> None:
        self.item: WriterItem | None = item  # None once let go
        self.finished = type(item) is FinishedEpisode
        if type(item) is list:
            records, self.episode_id = item, None
        else:
            records, self.episode_id = item.records, item.episode_id  # type: ignore[union-attr]
        self.size = len(records)
        self.sampled = 0
        self.key: tuple[int, int] | None = None  # its first span in the span file
        if writes_spans:
            for record in records:
                if record.sampled:
                    if self.key is None:
                        self.key = (record.trace_id, record.span_id)
                    self.sampled += 1


class RemoteWriter:
    """An :class:`EpisodeWriter` in the helper process, with the same methods.

    Called from the processor's one background thread; ``report`` from any thread. When the
    helper cannot start or dies, a local EpisodeWriter built from the same spec takes over,
    after writing what the helper was sent and had not written (see the module docstring).
    """

    def __init__(
        self,
        spec: WriterSpec,
        *,
        open_timeout: float = 60.0,
        on_summary: Callable[[EpisodeSummary], None] | None = None,
        max_retained_spans: int | None = None,
    ) -> None:
        self._spec = spec._replace(summaries=on_summary is not None)
        self._on_summary = on_summary
        self._open_timeout = open_timeout
        self._max_retained = (
            MAX_RETAINED_SPANS if max_retained_spans is None else max_retained_spans
        )
        self._local: EpisodeWriter | None = None
        self._lost = {"episodes": 0, "spans": 0}
        # What the helper confirmed, and what it was sent since: guarded by _state_lock (the
        # reply thread confirms, the processor's thread sends).
        self._state_lock = threading.Lock()
        self._reset_state()
        self._replies: dict[str, threading.Event] = {}
        self._open_error: str | None = None
        self._exit_code: int | None = None
        self._gone = threading.Event()
        self._takeover_lock = threading.Lock()
        self._closed = False
        self._export_flushed = False
        self._connect()

    def _reset_state(self) -> None:
        with self._state_lock:
            self._remote_report = empty_report()
            self._recovered = empty_report()  # what a takeover found the helper had written
            self._unconfirmed: collections.deque[_Sent] = collections.deque()
            self._sent = 0  # items sent
            self._confirmed = 0  # items the helper has written
            self._positions: dict[str, Any] = {}
            self._retained_spans = 0
            self._let_go = 0  # unconfirmed items (the oldest) whose records were let go
            # Open episodes whose spans the helper confirmed (held there towards their
            # trajectories): episode id -> spans.
            self._held_open: dict[str, int] = {}

    @property
    def writes_spans(self) -> bool:
        """Whether it wants every span (for the span file or the OTLP endpoint)."""
        return self._spec.span_file is not None or self._spec.span_export is not None

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
        self._send((operation, self._id, payload))
        if not event.wait(timeout) or self._gone.is_set():
            raise HelperUnavailable(f"no reply to {operation!r} from the writer process")

    def _send(self, message: tuple[str, int, Any]) -> None:
        try:
            self._helper.send(message)
        except HelperUnavailable:
            # Gone for sure (its end of the pipe is closed), even if the reply thread has not
            # said so yet.
            self._gone.set()
            raise

    def _reply(self, operation: str, payload: Any) -> None:
        """Called on the reply thread: for "opened" an error text (or None) and the state,
        else the state (see :func:`_state`)."""
        if operation == "opened":
            self._open_error, state = payload
        elif operation == "export_flushed":
            self._export_flushed, state = payload
        else:
            state = payload
        if state is not None:
            if self._on_summary is not None:
                for summary in state["summaries"]:
                    self._on_summary(summary)
            self._confirm(state)
        event = self._replies.get(operation)
        if event is not None:
            event.set()

    def _confirm(self, state: dict[str, Any]) -> None:
        with self._state_lock:
            self._remote_report = state["report"]
            self._positions = state["positions"]
            self._confirmed = state["items"]
            self._drop_confirmed()

    def _drop_confirmed(self) -> None:
        unconfirmed = self._unconfirmed
        # The oldest unconfirmed item is number sent - len + 1.
        held = self._held_open
        for _ in range(min(len(unconfirmed), self._confirmed - (self._sent - len(unconfirmed)))):
            sent = unconfirmed.popleft()
            if sent.episode_id is not None:
                if sent.finished:
                    held.pop(sent.episode_id, None)
                else:
                    held[sent.episode_id] = held.get(sent.episode_id, 0) + sent.size
            if sent.item is None:
                self._let_go -= 1
            else:
                self._retained_spans -= sent.size

    def _keep(self, items: list[WriterItem]) -> None:
        """Remember items just sent, until the helper confirms them."""
        writes_spans = self._spec.span_file is not None  # (their keys: in the span file)
        with self._state_lock:
            unconfirmed = self._unconfirmed
            for item in items:
                sent = _Sent(item, writes_spans)
                unconfirmed.append(sent)
                self._retained_spans += sent.size
            self._sent += len(items)
            self._drop_confirmed()  # the reply may have come already
            while self._retained_spans > self._max_retained and self._let_go < len(unconfirmed):
                oldest = unconfirmed[self._let_go]
                oldest.item = None
                self._retained_spans -= oldest.size
                self._let_go += 1

    def _helper_gone(self, exit_code: int | None) -> None:
        """Called by the helper (reply thread or a failed send) when the process is gone."""
        self._exit_code = exit_code
        self._gone.set()
        for event in list(self._replies.values()):
            event.set()

    def _go_local(self, reason: str, *, crashed: bool = False) -> None:
        # A sink that cannot open raises here.
        local = EpisodeWriter.from_spec(self._spec, on_summary=self._on_summary)
        if crashed:  # cut a line the helper tore now, not at the next write, which may not come
            for sink in local.sinks:
                if isinstance(sink, JsonlSink):
                    sink.resume()
        with self._state_lock:
            unconfirmed = list(self._unconfirmed)
            self._unconfirmed.clear()
            self._retained_spans = self._let_go = 0
            positions = dict(self._positions)
            held_open, self._held_open = self._held_open, {}
        for sent in unconfirmed:  # open episodes' spans let go here: read back as well
            if not sent.finished and sent.item is None and sent.episode_id is not None:
                held_open.setdefault(sent.episode_id, 0)
        if held_open:
            self._recover_open(local, held_open, unconfirmed)
        if unconfirmed:
            found, again, lost_episodes, lost_spans = self._take_over(local, unconfirmed, positions)
            logger.error(
                "agenttrace: %s; writing in this process from now on. Of %d episode(s) and "
                "span batch(es) sent to it and not confirmed written, %d episode(s) were found "
                "in its files and %d item(s) were written again here; %d episode(s) and %d "
                "span(s) are counted as lost",
                reason,
                len(unconfirmed),
                found,
                again,
                lost_episodes,
                lost_spans,
            )
        elif self._sent:
            logger.error(
                "agenttrace: %s; writing in this process from now on (it had written "
                "everything it was sent)",
                reason,
            )
        else:
            logger.warning("agenttrace: %s; writing in this process instead", reason)
        self._local = local

    def _recover_open(
        self, local: EpisodeWriter, held_open: dict[str, int], unconfirmed: list[_Sent]
    ) -> None:
        """Give the stand-in the spans of open episodes that only the helper held, read back
        from the span file (without one they are lost, and those episodes come out
        incomplete). Spans of unconfirmed items are left to ``_take_over``."""
        span_writer = local.span_writer
        if span_writer is None:
            self._lost["spans"] += sum(held_open.values())
            return
        skip = {
            (record.trace_id, record.span_id)
            for sent in unconfirmed
            if sent.item is not None and type(sent.item) is not list
            for record in sent.item.records  # type: ignore[union-attr]
        }
        found: dict[str, list[SpanRecord]] = {episode_id: [] for episode_id in held_open}
        for line in lines_since(span_writer, (0, 0)):
            for record in split_vector_steps(iter_records([line], on_error=_ignore)):
                episode_id = record.attributes.get(sc.EPISODE_ID)
                if episode_id in found and (record.trace_id, record.span_id) not in skip:
                    found[str(episode_id)].append(record)
        for episode_id, records in found.items():
            if records:
                local.resume(episode_id, records)
            self._lost["spans"] += max(0, held_open[episode_id] - len(records))

    def _take_over(
        self, local: EpisodeWriter, unconfirmed: list[_Sent], positions: dict[str, Any]
    ) -> tuple[int, int, int, int]:
        """Finish the items the helper did not confirm: count those in its files as written,
        write the others here (or count them lost when their records were let go).

        Returns (episodes found written, items written again, episodes lost, spans lost).
        """
        in_span_file: set[tuple[int, int]] = set()
        span_position = positions.get("spans")
        if local.span_writer is None or not any(sent.key for sent in unconfirmed):
            span_position = None
        if span_position is not None:
            for line in lines_since(local.span_writer, span_position):
                for record in iter_records([line], on_error=_ignore):
                    in_span_file.add((record.trace_id, record.span_id))
        written: dict[str, dict[str, Any]] = {}
        commit = local.commit_sink
        wanted = {sent.episode_id for sent in unconfirmed if sent.episode_id is not None}
        if commit is not None and positions.get("commit") is not None and wanted:
            for line in lines_since(commit, positions["commit"]):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                episode_id = data.get("episode_id") if isinstance(data, dict) else None
                if isinstance(episode_id, str) and episode_id in wanted:
                    written[episode_id] = data
        recovered = self._recovered
        found = again = lost_episodes = lost_spans = 0
        for sent in unconfirmed:
            spans_there = sent.key is not None and sent.key in in_span_file
            if spans_there:
                recovered["spans_written"] += sent.sampled
                recovered["spans_done"] += sent.sampled
            if sent.episode_id is None:  # spans outside episodes
                if spans_there or not sent.sampled:
                    continue
                if sent.item is not None:
                    local.write([sent.item])
                    again += 1
                else:
                    lost_spans += sent.sampled
                continue
            if not sent.finished:  # spans of an open episode
                if sent.item is not None:
                    local.write_open(sent.item, spans=not spans_there)  # type: ignore[arg-type]
                    again += 1
                elif not spans_there:
                    lost_spans += sent.sampled
                continue
            data = written.get(sent.episode_id)
            if data is not None:  # the helper wrote it and died before saying so
                local.discard(sent.episode_id)
                found += 1
                recovered["episodes_done"] += 1
                status = str(data.get("status"))
                recovered["statuses"][status] = recovered["statuses"].get(status, 0) + 1
                if not spans_there:
                    lost_spans += sent.sampled
                self._summarize(data)
            elif sent.item is not None:
                local.write_episode(sent.item, spans=not spans_there)  # type: ignore[arg-type]
                again += 1
            else:
                lost_episodes += 1
                if not spans_there:
                    lost_spans += sent.sampled
        self._lost["episodes"] += lost_episodes
        self._lost["spans"] += lost_spans
        return found, again, lost_episodes, lost_spans

    def _summarize(self, data: dict[str, Any]) -> None:
        if self._on_summary is None:
            return
        try:
            self._on_summary(summarize(Trajectory.from_dict(data)))
        except Exception:
            logger.debug("agenttrace: no metrics for an episode the writer process wrote")

    def _usable_remote(self) -> bool:
        if self._local is not None:
            return False
        if self._pid != os.getpid():  # forked: the parent's helper is not ours
            self._reset_state()
            self._connect()
            return self._local is None
        if self._gone.is_set():
            with self._takeover_lock:  # once, even if close() races a late write()
                if self._local is None:
                    self._helper.wait_gone()  # every reply read, nothing more written by it
                    code = self._helper.process.returncode
                    self._go_local(
                        "the writer process exited unexpectedly (exit code "
                        f"{self._exit_code if code is None else code})",
                        crashed=True,
                    )
            return False
        return True

    # --- the EpisodeWriter interface ------------------------------------------------------

    def write(self, items: list[WriterItem]) -> None:
        if self._usable_remote():
            try:
                self._send(("write", self._id, to_wire(items)))
            except HelperUnavailable:
                self._usable_remote()  # switches to local; these items were not sent
            else:
                self._keep(items)
                return
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

    def flush_export(self, timeout: float) -> bool:
        """See :meth:`EpisodeWriter.flush_export`."""
        network = any(sink.kind == "otlp" for sink in self._spec.sinks)  # OTLP logs
        if self._spec.span_export is None and not network:
            return True
        if self._usable_remote():
            self._export_flushed = False
            try:
                self._request("flush_export", timeout, timeout + _REPLY_SLACK)
            except HelperUnavailable:
                return False
            return self._export_flushed
        assert self._local is not None
        return self._local.flush_export(timeout)

    def close(self, timeout: float | None = 60.0) -> None:
        """Finish the files and close the writer; ``timeout`` bounds what goes over the
        network (see :meth:`EpisodeWriter.close`) and the wait for the helper's reply."""
        if self._closed:
            return
        self._closed = True
        if self._usable_remote():
            try:
                wait = None if timeout is None else timeout + _REPLY_SLACK
                self._request("close", timeout, wait)
                self._helper.unregister(self._id)
                return
            except HelperUnavailable:
                if self._usable_remote():
                    return  # timed out: the helper finishes the files when it gets to them
        assert self._local is not None
        self._local.close(timeout)

    def report(self) -> dict[str, Any]:
        with self._state_lock:
            report = merge_reports(self._remote_report, self._recovered)
        if self._local is not None:
            report = merge_reports(report, self._local.report())
        report["episodes_lost_writer_crash"] = self._lost["episodes"]
        report["spans_lost_writer_crash"] = self._lost["spans"]
        return report


def _ignore(error: Exception) -> None:
    pass


_REPLY_TO = {
    "open": "opened",
    "flush": "flushed",
    "flush_export": "export_flushed",
    "close": "closed",
}
#: Seconds a reply may take beyond the timeout the helper was given (files, the pipe).
_REPLY_SLACK = 2.0

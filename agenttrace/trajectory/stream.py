"""Grouping span records into episodes, in one pass and bounded memory.

Trace storage hands out spans in its own order: children usually before their parents (a span
is exported when it ends), episodes interleaved, an episode spread over many lines and files,
spans of other processes late. :class:`StreamingAssembler` takes records one at a time and
gives back each trajectory as soon as its episode is complete, built by the one assembler
(:func:`~agenttrace.trajectory.assembler.build_trajectory`); what never completes comes out of
:meth:`~StreamingAssembler.finish` marked ``incomplete``. :func:`assemble` is the same grouping
over a finite collection.

An episode is *complete* when its ``episode`` span has ended and every step ``0 .. length-1``
has a span. It is then held for ``grace`` more records, so spans another process exported a
little later (an env server's, an LLM client's) still join it. Records that arrive after their
episode was written are counted as ``late``; they cannot change what was written.

Records without ``rl.episode.id`` (other instrumentations' spans) join the episode of their
nearest ancestor that has one; they wait for that ancestor for at most ``orphan_window``
records and are then counted as ``unrelated``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from agenttrace import semconv as sc
from agenttrace.trajectory.assembler import EpisodeAssembly
from agenttrace.trajectory.conventions import Conventions
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord, is_vector_step, split_vector_step

_EPISODE_ID = sc.EPISODE_ID
_VECTOR_STEP = sc.ENV_VECTOR_STEP
_SCORE = sc.SCORE
_TIMESTEP_INDEX = sc.TIMESTEP_INDEX
_EPISODE = sc.EPISODE
#: Span keys and ids of written episodes remembered to tell late records from unrelated ones.
_REMEMBERED = 200_000

SpanKey = int | tuple[int, int]  # see _span_key
_SPAN_IDS = 1 << 64  # OTLP span ids are 8 bytes


def _span_key(trace_id: int, span_id: int) -> SpanKey:
    """A span's key: ``trace_id << 64 | span_id``, or the pair for ids outside OTLP's sizes.

    One int, because tuples count as garbage-collected objects and ints do not: a key per
    record is kept until its episode is written and then remembered (see _REMEMBERED).
    """
    if (
        type(span_id) is int
        and 0 <= span_id < _SPAN_IDS
        and type(trace_id) is int
        and trace_id >= 0
    ):
        return trace_id << 64 | span_id
    return (trace_id, span_id)


@dataclass
class AssemblyCounts:
    """What the grouping saw besides episodes (shown in ``agenttrace export``'s summary)."""

    records: int = 0
    complete: int = 0  # episodes written whole
    incomplete: int = 0  # episodes written as status incomplete (never ended, or steps missing)
    late: int = 0  # records that arrived after their episode was written
    duplicates: int = 0  # records of a span already seen (same trace and span id)
    unrelated: int = 0  # records that belong to no episode


class _OpenEpisode:
    __slots__ = ("assembly", "due", "last", "order")

    def __init__(self, order: int, assembly: EpisodeAssembly) -> None:
        self.order = order  # sequence number of its first record, for finish()'s order
        self.last = order  # sequence number of its latest record (see write_quiet)
        self.assembly = assembly
        self.due: int | None = None  # sequence number at which it is written


class StreamingAssembler:
    """Feed span records in any order; get each trajectory once its episode is complete.

    ``grace=None`` never writes early (everything comes out of :meth:`finish`), which is what
    :func:`assemble` uses. ``trusted_scope`` is passed on to the assembler; an episode whose
    records pass ``max_episode_bytes`` is rebuilt a stretch of steps at a time, as live
    (:class:`~agenttrace.trajectory.assembler.EpisodeAssembly`). ``conventions`` translates
    other tracers' spans into agenttrace's names first
    (:mod:`agenttrace.trajectory.conventions`). ``on_problem(episode_id, field, reason)`` is
    told of each value the assembler left out or cut (a length claim far beyond the episode's
    steps, say); the trajectory's ``lossy`` says it too.
    """

    def __init__(
        self,
        *,
        grace: int | None = 1_000,
        orphan_window: int = 100_000,
        trusted_scope: str | None = None,
        max_episode_bytes: int | None = None,
        conventions: Conventions | None = None,
        on_problem: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self.counts = AssemblyCounts()
        self._on_problem = on_problem
        if conventions:
            self._translate = conventions.translate
            self.add = self._add_translated  # type: ignore[method-assign]
        self._max_episode_bytes = max_episode_bytes
        self._grace = grace
        self._orphan_window = orphan_window
        self._trusted = trusted_scope
        self._open: dict[str, _OpenEpisode] = {}
        self._owner: dict[SpanKey, str] = {}  # spans of open episodes -> episode id
        self._waiting: dict[SpanKey, list[SpanRecord]] = {}  # parent key -> orphans under it
        self._waiting_since: deque[tuple[int, SpanKey]] = deque()
        self._due: deque[tuple[int, str]] = deque()
        self._written_spans: dict[SpanKey, None] = {}  # bounded, oldest first
        self._written_episodes: dict[str, None] = {}
        # Score spans of episodes not seen yet (they join the episode if it comes), and those
        # whose episode was written already or never came: the caller keeps them as score
        # records (agenttrace.sinks.scores), which loaders merge.
        self._early_scores: dict[str, list[SpanRecord]] = {}
        self.late_scores: list[SpanRecord] = []

    @property
    def open_episodes(self) -> int:
        return len(self._open)

    def add(self, record: SpanRecord) -> Sequence[Trajectory]:
        """Take one record; return the trajectories that became due (usually none: a shared
        empty tuple, as this runs once per record)."""
        counts = self.counts
        counts.records += 1
        sequence = counts.records
        episode_id = record.attributes.get(_EPISODE_ID)  # assembler.episode_id_of, inline
        if episode_id is None:
            if record.name == _VECTOR_STEP and is_vector_step(record):
                for part in split_vector_step(record):  # one env.step per sub-environment
                    part_of = part.attributes[_EPISODE_ID]
                    if part_of in self._written_episodes:
                        counts.late += 1
                    else:
                        self._attach(part_of, part, sequence)
            else:
                self._add_orphan(record, sequence)
        else:
            if type(episode_id) is not str:
                episode_id = str(episode_id)
            if record.name == _SCORE and episode_id not in self._open:
                self._hold_score(episode_id, record)
            elif episode_id in self._written_episodes:
                counts.late += 1
            else:
                self._attach(episode_id, record, sequence)
        done: Sequence[Trajectory] = _NOTHING
        due = self._due
        if due and due[0][0] <= sequence:
            done = written = []
            while due and due[0][0] <= sequence:
                _, episode_id = due.popleft()
                if episode_id in self._open:
                    written.append(self._write(episode_id))
        if self._waiting_since and self._waiting_since[0][0] < sequence - self._orphan_window:
            self._expire_orphans(sequence - self._orphan_window)
        return done

    def _add_translated(self, record: SpanRecord) -> Sequence[Trajectory]:
        """:meth:`add` of the record in agenttrace's names (several for a span of scores)."""
        try:
            translated = self._translate(record)
        except (ArithmeticError, ValueError, TypeError, RecursionError):
            # a value the mapping could not convert (10**400 as a reward): the span as it is
            translated = [record]
        if len(translated) == 1:
            return StreamingAssembler.add(self, translated[0])
        done: list[Trajectory] = []
        for part in translated:
            done.extend(StreamingAssembler.add(self, part))
        return done

    def feed(self, records: Iterable[SpanRecord]) -> Iterator[Trajectory]:
        """All trajectories of ``records``: each as it completes, then the rest at the end."""
        add = self.add
        for record in records:
            done = add(record)
            if done:
                yield from done
        yield from self.finish()

    def finish(self) -> list[Trajectory]:
        """Write every open episode as it is (incomplete ones marked so), oldest first."""
        left = sorted(self._open.items(), key=lambda item: item[1].order)
        done = [self._write(episode_id) for episode_id, _ in left]
        for held in self._early_scores.values():  # their episode never came
            self.late_scores.extend(held)
        self._early_scores.clear()
        self.counts.unrelated += sum(len(orphans) for orphans in self._waiting.values())
        self._waiting.clear()
        self._waiting_since.clear()
        self._due.clear()
        return done

    # --- a service's clock (agenttrace collect) -----------------------------------------------

    def write_quiet(self, complete_since: int, any_since: int) -> list[Trajectory]:
        """Write the episodes no record has joined after record number ``complete_since``
        (complete ones) or ``any_since`` (any, incomplete ones marked so): a service whose
        producers fell silent cannot wait for ``grace`` more records. The caller turns its
        clock into record numbers (``counts.records`` at some moment)."""
        quiet = [
            episode_id
            for episode_id, episode in self._open.items()
            if episode.last <= any_since
            or (episode.last <= complete_since and episode.assembly.complete)
        ]
        return [self._write(episode_id) for episode_id in quiet]

    def mark_written(self, episode_ids: Iterable[str]) -> None:
        """Episodes written before (by an earlier run of a service): their records count as
        late, and they are never written again."""
        for episode_id in episode_ids:
            self._written_episodes[episode_id] = None
        _forget_oldest(self._written_episodes, _REMEMBERED)

    def oldest_waiting(self) -> int | None:
        """The record number of the oldest record waiting for its parent (a span of another
        instrumentation whose episode is not known yet), or None: whoever keeps records (a
        service's span log) must keep that one."""
        return self._waiting_since[0][0] if self._waiting_since else None

    def is_open(self, episode_id: str) -> bool:
        return episode_id in self._open

    def episode_of(self, record: SpanRecord) -> str | None:
        """The open episode a record joined (None: none, or not yet)."""
        return self._owner.get(_span_key(record.trace_id, record.span_id))

    @property
    def holds_scores(self) -> bool:
        """Whether scores wait for an episode not seen yet (see :meth:`oldest_needed`)."""
        return bool(self._early_scores)

    # --- grouping ----------------------------------------------------------------------------

    def _add_orphan(self, record: SpanRecord, sequence: int) -> None:
        parent = record.parent_span_id
        if not parent:
            self.counts.unrelated += 1
            return
        key = _span_key(record.trace_id, parent)
        owner = self._owner.get(key)
        if owner is not None:
            self._attach(owner, record, sequence)
        elif key in self._written_spans:
            self.counts.late += 1
        else:
            if key not in self._waiting:
                self._waiting[key] = []
                self._waiting_since.append((sequence, key))
            self._waiting[key].append(record)

    def _attach(self, episode_id: str, record: SpanRecord, sequence: int) -> None:
        """Add ``record`` (and the orphans waiting for it, recursively) to an open episode."""
        episode = self._open.get(episode_id)
        if episode is None:
            told = self._on_problem
            assembly = EpisodeAssembly(
                episode_id,
                trusted_scope=self._trusted,
                max_bytes=self._max_episode_bytes,
                on_let_go=self._let_go,
                on_problem=None if told is None else partial(told, episode_id),
            )
            episode = self._open[episode_id] = _OpenEpisode(sequence, assembly)
            early = self._early_scores.pop(episode_id, None)
            if early:
                assembly.add(early)
        owner = self._owner
        written = self._written_spans
        waiting = self._waiting
        taken: list[SpanRecord] = []
        pending: list[SpanRecord] | None = None  # orphans to add, last first
        while True:
            trace_id, span_id = record.trace_id, record.span_id
            if type(span_id) is int and 0 <= span_id < _SPAN_IDS and type(trace_id) is int:
                key: SpanKey = trace_id << 64 | span_id if trace_id >= 0 else (trace_id, span_id)
            else:
                key = (trace_id, span_id)  # _span_key, inline
            if key in owner:
                self.counts.duplicates += 1
            elif key in written:  # a span of an episode already written, under another id
                self.counts.late += 1
            else:
                owner[key] = episode_id
                taken.append(record)
                if waiting:
                    orphans = waiting.pop(key, None)
                    if orphans:
                        if pending is None:
                            pending = []
                        pending.extend(orphans)
            if not pending:
                break
            record = pending.pop()
        assembly = episode.assembly
        episode.last = sequence
        if taken:
            assembly.add(taken)
        elif assembly.empty:  # its only record repeats a span of another episode
            del self._open[episode_id]
            return
        if episode.due is None and self._grace is not None and assembly.complete:
            episode.due = sequence + self._grace
            self._due.append((episode.due, episode_id))

    def _let_go(self, records: list[SpanRecord]) -> None:
        """Records of a long episode's finished stretch: remembered as written."""
        owner = self._owner
        written = self._written_spans
        for record in records:
            key = _span_key(record.trace_id, record.span_id)
            owner.pop(key, None)
            written[key] = None
        _forget_oldest(written, _REMEMBERED)

    def _hold_score(self, episode_id: str, record: SpanRecord) -> None:
        """A score of an episode not open: late if it was written, else held for it."""
        if episode_id in self._written_episodes:
            self.late_scores.append(record)
            return
        self._early_scores.setdefault(episode_id, []).append(record)
        if len(self._early_scores) > _REMEMBERED:  # (bounded: the oldest count as late)
            oldest = next(iter(self._early_scores))
            self.late_scores.extend(self._early_scores.pop(oldest))

    def _write(self, episode_id: str) -> Trajectory:
        episode = self._open.pop(episode_id)
        assembly = episode.assembly
        trajectory = assembly.trajectory()
        if trajectory.status == sc.STATUS_INCOMPLETE:
            self.counts.incomplete += 1
        else:
            self.counts.complete += 1
        self.counts.late += assembly.late
        self._let_go(assembly.records)
        self._written_episodes[episode_id] = None
        _forget_oldest(self._written_episodes, _REMEMBERED)
        return trajectory

    def _expire_orphans(self, before: int) -> None:
        since = self._waiting_since
        while since and since[0][0] < before:
            _, key = since.popleft()
            orphans = self._waiting.pop(key, None)
            if orphans:
                self.counts.unrelated += len(orphans)


_NOTHING: tuple[Trajectory, ...] = ()


def _forget_oldest(remembered: dict, limit: int) -> None:
    if len(remembered) > limit:
        for key in list(remembered)[: len(remembered) - limit // 2]:
            del remembered[key]


def assemble(
    records: Iterable[SpanRecord], *, conventions: Conventions | None = None
) -> list[Trajectory]:
    """Group records by episode and rebuild each; episodes in order of first appearance.

    Records without ``rl.episode.id`` join the episode of their nearest ancestor that has one
    (spans from other instrumentations); records that belong to no episode are ignored, and a
    second record of the same span is ignored. ``conventions``: see StreamingAssembler.
    """
    stream = StreamingAssembler(grace=None, orphan_window=2**62, conventions=conventions)
    return list(stream.feed(records))

"""The one assembler: span records -> trajectories.

Pure functions, no I/O, no knowledge of where the records came from. The live
:class:`~agenttrace.processing.TrajectoryProcessor` calls :func:`build_trajectory` with one
episode's records; every storage reader's records are grouped into episodes by
:mod:`agenttrace.trajectory.stream`, which calls it too. So an episode rebuilt live and one
rebuilt from trace storage are equal by construction.

How a step is put together (docs/trajectory-format.md has the full rules):

* spans carrying ``rl.timestep.index`` *i* (timestep, agent.act, env.step, step.record, and
  a model call that is a turn of its own) make step *i*;
* the observation the agent acted on comes from step.record, agent.act or timestep, else from
  the previous env.step's returned observation (env.reset's for step 0);
* action, reward, termination, discount and info come from step.record, then env.step, then
  agent.act, then timestep, then the turn's model call, so the reward sits with the action
  that earned it;
* GenAI spans (``chat …``, ``execute_tool …``, from agenttrace or any other instrumentation)
  belong to the step whose span is their ancestor, else to the step their own index names,
  else to the next step; a model call nested in another counts once
  (:mod:`agenttrace.trajectory.genai` reads each span);
* a step that no timestep or agent.act describes is an agent turn: what it lacks, its model
  calls give (the observation: what the first call was asked; the action: what the last one
  answered; truncated: the last answer was cut at its length limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.call_placement import (
    attach_genai_calls,
    complete_turns,
    step_index_of,
)
from agenttrace.trajectory.codec import (
    RawJSON,
    as_raw_json,
    checked_json,
    deep_texts,
    is_deep_json,
    is_json,
)
from agenttrace.trajectory.json_depth import DEEP_LENGTH, MAX_DEPTH
from agenttrace.trajectory.lossy import lossy_fields
from agenttrace.trajectory.model import Step, Trajectory, decoded_content, raw_content
from agenttrace.trajectory.outcome import (
    StepIndices,
    derived_status,
    episode_error,
    is_failure,
    span_error,
    step_error,
)
from agenttrace.trajectory.records import INDEX_LIMIT, SpanRecord, left_out, value_problem
from agenttrace.trajectory.scores import Score, apply_scores, score_from_record
from agenttrace.trajectory.spill import SpilledSteps

_STEP_ROLES = sc.STEP_ROLES
# Keys of a step's parts for the model calls that carry its index themselves (a turn with no
# step span around it): the first to start (what it was asked) and the last to end.
_FIRST_CALL, _LAST_CALL = "llm.first", "llm.last"
# Episode-span attributes that become top-level trajectory fields instead of `attributes`.
_LIFTED = frozenset(
    {
        sc.EPISODE_ID,
        sc.EPISODE_EXTERNAL_ID,
        sc.TASK_ID,
        sc.EPISODE_STATUS,
        sc.EPISODE_RETURN,
        sc.EPISODE_LENGTH,
    }
)
_MISSING = object()
# The lossy paths of the episode span's lifted attributes: their trajectory fields.
_LIFTED_PATHS = {
    "attributes." + sc.EPISODE_RETURN: "return",
    "attributes." + sc.EPISODE_LENGTH: "length",
    "attributes." + sc.EPISODE_STATUS: "status",
}


def episode_id_of(record: SpanRecord) -> str | None:
    value = record.attributes.get(sc.EPISODE_ID)
    return None if value is None else str(value)


def build_trajectory(
    records: Sequence[SpanRecord],
    episode_id: str | None = None,
    *,
    trusted_scope: str | None = None,
) -> Trajectory:
    """Rebuild one episode from its span records (in any order, possibly incomplete).

    Content attributes are kept as JSON text and decoded only when read. Text from spans of
    instrumentation scope ``trusted_scope`` is taken as valid JSON unchecked (the live
    processor passes agenttrace's own scope, whose text its encoder wrote); all other text is
    parsed once, and text that is not JSON is kept as a plain string.
    """
    if not records:
        raise ValueError("build_trajectory needs at least one span record")
    assembly = EpisodeAssembly(episode_id, trusted_scope=trusted_scope)
    assembly.add(records)
    return assembly.trajectory()


class EpisodeAssembly:
    """One episode's span records on their way to its trajectory, added in any number of batches.

    With ``max_bytes``, an episode whose retained records pass that size is rebuilt a stretch
    at a time: the steps before the last two seen are finished, written to disk
    (:class:`~agenttrace.trajectory.spill.SpilledSteps`) and their records let go, so a
    million-step episode costs a bounded amount of memory. Spans end in order in a live run
    and are stored in that order, so those steps already have every span they will get; a
    record that still comes for a finished step is left out and counted (``late``). Without
    ``max_bytes`` (and below it) the result is exactly the one-shot rebuild.
    """

    def __init__(
        self,
        episode_id: str | None = None,
        *,
        trusted_scope: str | None = None,
        max_bytes: int | None = None,
        on_let_go: Callable[[list[SpanRecord]], None] | None = None,
        on_problem: Callable[[str, str], None] | None = None,
    ) -> None:
        self.episode_id = episode_id
        self._on_problem = on_problem  # told (field, reason) of each value left out or cut
        self._on_let_go = on_let_go  # told which records a finished stretch let go
        self._trusted = trusted_scope
        self._max_bytes = max_bytes
        self._settle_at = max_bytes
        self.records: list[SpanRecord] = []  # retained: not yet part of a finished step
        self.retained_bytes = 0
        self.late = 0  # records of steps already finished and on disk (left out)
        self._first: SpanRecord | None = None
        self._has_timesteps = False  # (without, model calls after every step are turns)
        self._episode_span: SpanRecord | None = None
        self._reset_span: SpanRecord | None = None
        self._episode_span_ids: set[int] = set()
        self.scores: list[SpanRecord] = []  # score spans: applied to the trajectory at the end
        self._start: int | None = None
        self._end: int | None = None
        self._seen = StepIndices()
        self._settled_upto = -1  # steps up to this index are finished (in _spilled)
        self._spilled: SpilledSteps | None = None
        self._returned: Any = _MISSING  # what the last finished step returned (reset's: missing)
        self._previous_index = -1
        self._settled_return = 0.0
        self._last_settled: Step | None = None
        self._lossy: dict[str, str] = {}
        self._problems: dict[str, str] = {}  # field -> why its rl.* value was left out or cut
        # The first env.reset, env.step, agent.act or model-call span that failed: an episode
        # span that says no status of its own (another tracer's) errored with it.
        self._first_failure: SpanRecord | None = None

    @property
    def empty(self) -> bool:
        """Whether no record was added yet."""
        return self._first is None

    @property
    def ended(self) -> bool:
        """Whether the episode span has ended."""
        span = self._episode_span
        return span is not None and span.end_time is not None

    @property
    def complete(self) -> bool:
        """Whether the episode span has ended and every step it counts has a span."""
        if not self.ended:
            return False
        length = self._episode_span.attributes.get(sc.EPISODE_LENGTH)  # type: ignore[union-attr]
        seen = self._seen
        return type(length) is not int or seen.covers(length) or not seen.credible(length)

    def has_span(self, span_id: int) -> bool:
        """Whether an ``episode`` span with this id was added."""
        return span_id in self._episode_span_ids

    def add(self, records: Iterable[SpanRecord]) -> None:
        step_roles = _STEP_ROLES
        index_key, turn_key = sc.TIMESTEP_INDEX, sc.TIMESTEP_TURN
        limit = INDEX_LIMIT
        retained = self.records
        size = self.retained_bytes
        for record in records:
            name = record.name
            if name == sc.SCORE:  # (no part of a step, nor of the episode's time span)
                self.scores.append(record)
                continue
            if name in step_roles:
                index = record.attributes.get(index_key)
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < limit:
                    if index <= self._settled_upto:
                        self.late += 1
                        continue
                    self._seen.add(index)
                if name == sc.TIMESTEP:
                    self._has_timesteps = True
            elif name == sc.ENV_RESET:
                reset = self._reset_span
                if reset is None or record.start_time >= reset.start_time:
                    self._reset_span = record
            elif name == sc.EPISODE:
                self._episode_span_ids.add(record.span_id)
                span = self._episode_span
                if span is None or record.start_time < span.start_time:
                    self._episode_span = record
            elif turn_key in record.attributes:  # a model call that is (part of) a turn
                index = record.attributes.get(index_key)
                if _is_turn(record, index, genai.call_kind(record)) and index > self._settled_upto:
                    self._seen.add(index)
            if record.status_code == "ERROR" and is_failure(record, self._first_failure):
                self._first_failure = record
            if self._first is None:
                self._first = record
            if self._start is None or record.start_time < self._start:
                self._start = record.start_time
            end = record.end_time
            if end is not None and (self._end is None or end > self._end):
                self._end = end
            retained.append(record)
            size += _retained_size(record)
        self.retained_bytes = size
        if self._settle_at is not None and size > self._settle_at:
            self.settle()

    def settle(self) -> int:
        """Finish the older half of the steps held and let their records go.

        The newer half stays: spans of a step can come a little after the next steps' (a
        storage that groups each batch by instrumentation scope writes other libraries' spans
        after agenttrace's). Returns how many steps were finished.
        """
        settled, highest = self._settled_upto, self._seen.highest
        upto = min(settled + max(1, (highest - settled) // 2), highest - 2)
        if upto <= settled:
            self._settle_at = max(self._max_bytes or 0, 2 * self.retained_bytes)
            return 0
        records = self.records
        deep = deep_texts()
        parts, genai_records = _parts_of(records)
        early = {i: roles for i, roles in parts.items() if i <= upto}
        later = {i: roles for i, roles in parts.items() if i > upto}
        steps, returned = self._build(early, self._returned, self._previous_index)
        previous = steps[-1].index if steps else self._previous_index
        later_steps, _ = self._build(later, returned, previous)
        genai_records = self._in_time(genai_records, [*steps, *later_steps])
        by_span_id = {record.span_id: record for record in records}
        placed = attach_genai_calls(
            [*steps, *later_steps],
            genai_records,
            by_span_id,
            self._trusted,
            turns=not self._has_timesteps,
        )
        complete_turns([*steps, *later_steps], parts)
        if deep_texts() != deep:  # content nested past MAX_DEPTH was kept as $json
            _note_deep(steps, self._problems)
        first_later = min((s.start_time or 0 for s in later_steps), default=None)
        step_of = _step_finder(records)
        kept: list[SpanRecord] = []
        let_go: list[SpanRecord] = []
        for record in records:
            index = placed.get(record.span_id, _MISSING)
            if index is _MISSING:
                index = step_of(record)
            if index is None:  # under no step: goes with the steps that started after it
                done = first_later is None or record.start_time < first_later
            else:
                done = index <= upto
            if record.name == sc.EPISODE or record is self._reset_span:
                done = False  # kept to the end: the episode's own fields come from them
            (let_go if done else kept).append(record)
        self.late += sum(1 for index in placed.values() if index <= settled)
        if self._trusted is None and steps:
            part = Trajectory(episode_id="", steps=steps)
            for path, reason in lossy_fields(let_go, part, step_of).items():
                self._lossy.setdefault(path, reason)
        if self._spilled is None:
            self._spilled = SpilledSteps()
        self._spilled.extend(steps)
        self._settled_return += sum(s.reward for s in steps if s.reward is not None)
        if steps:
            self._last_settled = steps[-1]
        self._returned, self._previous_index = returned, previous
        self._settled_upto = upto
        self.records = kept
        if self._on_let_go is not None:
            self._on_let_go(let_go)
        self.retained_bytes = size = sum(_retained_size(record) for record in kept)
        limit = self._max_bytes or 0
        # (a window that would not shrink, one huge step say, is not settled again at once)
        self._settle_at = limit if size <= limit * 3 // 4 else 2 * size
        return len(steps)

    def _in_time(self, genai_records: list[SpanRecord], steps: list[Step]) -> list[SpanRecord]:
        """The GenAI records that started after the last finished step; the others belong to
        finished steps (a call under no step span goes to the next step to start), so they are
        left out and counted."""
        last = self._last_settled
        if last is None or not steps:
            return genai_records
        last_start = last.start_time or 0
        kept = [record for record in genai_records if record.start_time > last_start]
        self.late += len(genai_records) - len(kept)
        return kept

    def _build(
        self, parts: Mapping[int, Mapping[str, SpanRecord]], returned: Any, previous: int
    ) -> tuple[list[Step], Any]:
        if returned is _MISSING:
            reset = self._reset_span
            returned = _content(reset, sc.OBSERVATION, None, self._trusted) if reset else None
        return _build_steps(parts, returned, previous, self._trusted, self._problems)

    @property
    def only_scores(self) -> bool:
        """Whether all that was added are scores: of an episode rebuilt elsewhere."""
        return self._first is None and bool(self.scores)

    def trajectory(self) -> Trajectory:
        """The trajectory of everything added (the records are not needed after this)."""
        if self._first is None:
            raise ValueError("an episode needs at least one span record besides scores")
        trusted = self._trusted
        records = self.records
        deep = deep_texts()
        parts, genai_records = _parts_of(records)
        steps, final_observation = self._build(parts, self._returned, self._previous_index)
        turns = not self._has_timesteps
        if genai_records and (steps or turns):
            genai_records = self._in_time(genai_records, steps)
            by_span_id = {record.span_id: record for record in records}
            placed = attach_genai_calls(steps, genai_records, by_span_id, trusted, turns=turns)
            complete_turns(steps, parts)
            if self._spilled is not None:
                self.late += sum(1 for index in placed.values() if index <= self._settled_upto)
        episode_span = self._episode_span
        if episode_span is not None and len(self._episode_span_ids) > 1:
            episode_span = merged_episode_span(episode_span, records)
        first = self._first
        episode_id = self.episode_id
        attrs = episode_span.attributes if episode_span is not None else {}
        external_id = attrs.get(sc.EPISODE_EXTERNAL_ID)
        if external_id is not None and str(external_id):
            episode_id = str(external_id)  # the id the user's code gave it (semconv)
        elif episode_id is None:
            episode_id = episode_id_of(episode_span or first) or format(first.trace_id, "032x")

        problems = self._problems
        length, missing = self._seen.length(attrs.get(sc.EPISODE_LENGTH), problems)
        expected = self._seen.highest + 1 if length is None else length
        if steps and steps[-1].index >= expected:  # turns of model calls no span counted
            length = expected = steps[-1].index + 1
        last = steps[-1] if steps else self._last_settled

        status = attrs.get(sc.EPISODE_STATUS)
        problem = value_problem(sc.EPISODE_STATUS, status)
        if problem is not None:
            problems["status"] = left_out(sc.EPISODE_STATUS, problem)
            status = None
        error = episode_error(episode_span, self._first_failure)
        if status is None and episode_span is not None and episode_span.end_time is not None:
            failure = self._first_failure
            if error is None and failure is not None:  # caught by the runner: one rule
                status, error = sc.STATUS_ERRORED, span_error(failure)
            else:
                status = derived_status(episode_span, last)
        ended = episode_span is not None and episode_span.end_time is not None
        attributes = {k: _plain(v) for k, v in attrs.items() if k not in _LIFTED}
        if not ended or missing:
            if status is not None:
                attributes[sc.EPISODE_STATUS] = status
            status = sc.STATUS_INCOMPLETE

        episode_return = attrs.get(sc.EPISODE_RETURN)
        if type(episode_return) is not float:
            problem = value_problem(sc.EPISODE_RETURN, episode_return)
            if problem is not None:
                problems["return"] = left_out(sc.EPISODE_RETURN, problem)
            if problem is not None or type(episode_return) is not int:  # (a bool: computed)
                episode_return = self._settled_return + float(
                    sum(s.reward for s in steps if s.reward is not None)
                )
        task_id = attrs.get(sc.TASK_ID)

        start = episode_span.start_time if episode_span else self._start
        end = episode_span.end_time if ended else self._end  # type: ignore[union-attr]

        all_steps: list[Step] | SpilledSteps = steps
        if self._spilled is not None:
            self._spilled.extend(steps)
            all_steps = self._spilled
        reset_span = self._reset_span
        trajectory = Trajectory(
            episode_id=episode_id,
            trace_id=format((episode_span or first).trace_id, "032x"),
            task_id=None if task_id is None else str(task_id),
            status=status,
            error=error,
            start_time=start,
            end_time=end,
            return_=float(episode_return),
            length=expected,
            attributes=attributes,
            steps=all_steps,  # type: ignore[arg-type]
            final_observation=final_observation,
            reset_info=_content(reset_span, sc.INFO, None, trusted) if reset_span else None,
            missing_steps=missing,
        )
        if deep_texts() != deep:  # content nested past MAX_DEPTH was kept as $json
            _note_deep(steps, problems, trajectory)
        if trusted is None:  # rebuilt from storage: say what it could not give back whole
            lossy = {**problems, **self._lossy}
            if records:
                part = trajectory
                if self._spilled is not None:  # (the spilled steps were checked already)
                    part = dataclasses.replace(trajectory, steps=steps)
                for path, reason in lossy_fields(records, part, _step_finder(records)).items():
                    lossy.setdefault(_LIFTED_PATHS.get(path, path), reason)
            trajectory.lossy = lossy
        elif problems:  # (values a live span should not have had)
            trajectory.lossy = dict(problems)
        if problems and self._on_problem is not None:
            for path, reason in problems.items():
                self._on_problem(path, reason)
        if self.scores:
            apply_scores(trajectory, _valid_scores(self.scores, self.episode_id))
        return trajectory


_COUNTED_BY_ITS_TRACER = (sc.EPISODE_RETURN, sc.EPISODE_LENGTH, sc.EPISODE_STATUS)


def merged_episode_span(outer: SpanRecord, records: Iterable[SpanRecord]) -> SpanRecord:
    """One episode seen as several episode spans (an ``episode`` target around a runner
    whose own episode span a preset reads) is one episode: the outermost span, with what it
    left out taken from the others.

    Attributes it lacks come from them. The return, length and status it stated were
    counted from what its own tracer saw, which left the other spans' steps out: they are
    counted from the steps instead (its status stays when it failed or was cancelled).
    When it did not fail and one of the others did, the episode failed with that one's
    error."""
    others = sorted(
        (r for r in records if r.name == sc.EPISODE and r.span_id != outer.span_id),
        key=lambda r: r.start_time,
    )
    attributes = {}
    for other in reversed(others):
        attributes.update(other.attributes)
    stated = {k: v for k, v in outer.attributes.items() if k not in _COUNTED_BY_ITS_TRACER}
    outer_failed = episode_error(outer) is not None
    status = outer.attributes.get(sc.EPISODE_STATUS)
    if outer_failed or status == sc.STATUS_CANCELLED:
        stated[sc.EPISODE_STATUS] = status
    attributes.update(stated)
    changes: dict[str, Any] = {"attributes": attributes}
    failed = next((r for r in others if episode_error(r) is not None), None)
    if failed is not None and not outer_failed:
        changes.update(
            status_code=failed.status_code,
            status_message=failed.status_message,
            events=(*outer.events, *failed.events),
        )
    return outer._replace(**changes)


def _retained_size(record: SpanRecord) -> int:
    """Rough bytes a record holds in memory: a fixed cost plus its attribute text."""
    attributes = record.attributes
    size = 560 + 90 * len(attributes)
    for value in attributes.values():
        if type(value) is str:
            size += len(value)
    return size


def _parts_of(
    records: Sequence[SpanRecord],
) -> tuple[dict[int, dict[str, SpanRecord]], list[SpanRecord]]:
    """The step spans by index and role, and the GenAI spans (one pass).

    A model call that is (part of) an agent turn is part of its step too, under
    ``_FIRST_CALL``/``_LAST_CALL``.
    """
    parts: dict[int, dict[str, SpanRecord]] = {}
    genai_records: list[SpanRecord] = []
    unindexed: list[SpanRecord] = []
    step_roles = _STEP_ROLES
    index_key = sc.TIMESTEP_INDEX
    limit = INDEX_LIMIT
    for record in records:
        name = record.name
        if name in step_roles:
            index = record.attributes.get(index_key)
            if type(index) is int and 0 <= index < limit:  # not a bool, nor an int subclass
                roles = parts.get(index)
                if roles is None:
                    parts[index] = {name: record}
                else:
                    roles[name] = record
            elif isinstance(index, int) and not isinstance(index, bool) and 0 <= index < limit:
                parts.setdefault(index, {})[name] = record
            elif index is None and record.parent_span_id:
                unindexed.append(record)
        elif name != sc.ENV_RESET:
            kind = genai.call_kind(record)
            if kind is None:
                continue
            genai_records.append(record)
            index = record.attributes.get(index_key)
            if _is_turn(record, index, kind):
                roles = parts.setdefault(index, {})
                first = roles.get(_FIRST_CALL)
                if first is None or record.start_time < first.start_time:
                    roles[_FIRST_CALL] = record
                last = roles.get(_LAST_CALL)
                if last is None or (record.end_time or 0) > (last.end_time or 0):
                    roles[_LAST_CALL] = record
    if unindexed:
        # Another tracer's env.step inside its timestep span, without an index of its own
        # (a conventions mapping gives the timestep its index): the step of that ancestor.
        by_span_id = {record.span_id: record for record in records}
        for record in unindexed:
            index = step_index_of(record, by_span_id)
            if type(index) is int and 0 <= index < limit:
                parts.setdefault(index, {}).setdefault(record.name, record)
    return parts, genai_records


def _is_turn(record: SpanRecord, index: Any, kind: str | None) -> bool:
    """Whether ``record`` is a model call that makes (part of) the agent turn at ``index``:
    marked so by agenttrace, which only does it outside any step span. (A call inside a step
    carries that step's index too, but if the step's spans never arrived it goes with them.)"""
    return (
        record.attributes.get(sc.TIMESTEP_TURN) is True
        and type(index) is int
        and 0 <= index < INDEX_LIMIT
        and kind == genai.MODEL_CALL
    )


def _step_finder(records: Sequence[SpanRecord]) -> Callable[[SpanRecord], int | None]:
    """``step_index_of`` over these records, its span index built on first use."""
    by_span_id: dict[int, SpanRecord] = {}

    def step_of(record: SpanRecord) -> int | None:
        if not by_span_id:
            by_span_id.update((r.span_id, r) for r in records)
        return step_index_of(record, by_span_id)

    return step_of


def _content(record: SpanRecord, key: str, default: Any, trusted: str | None) -> Any:
    """A JSON-encoded content attribute as lazily decoded text; non-JSON text stays text."""
    value = record.attributes.get(key, _MISSING)
    if value is _MISSING:
        return default
    return _text(value, trusted is not None and record.scope_name == trusted)


def _plain(value: Any) -> Any:
    """Attribute sequences arrive as tuples live and lists from storage: use lists."""
    return list(value) if isinstance(value, tuple) else value


def _text(value: Any, trusted: bool) -> Any:
    """A content attribute value as lazily decoded JSON text (see ``_content``)."""
    if type(value) is str:  # as_raw_json, one call less: this runs for every content value
        if trusted:
            return RawJSON(value)
        if len(value) > DEEP_LENGTH:  # (may nest past MAX_DEPTH: checked_json tells)
            return checked_json(value)
        return RawJSON(value) if is_json(value) else value
    if not isinstance(value, str):
        return _plain(value)
    return as_raw_json(value, trusted=trusted)


def _build_steps(
    parts: Mapping[int, Mapping[str, SpanRecord]],
    returned: Any,
    previous_index: int,
    trusted: str | None,
    problems: dict[str, str],
) -> tuple[list[Step], Any]:
    """The steps, in index order, and the observation the last one returned.

    One pass: step i acts on what step.record/agent.act/timestep saw, else on what step i-1
    returned (``returned``, the reset's or the step ``previous_index``'s, for the first); its
    outcome fields come from step.record, then env.step, then agent.act, then timestep, then
    its own model calls (one merged dict, later roles overriding earlier ones).
    """
    steps: list[Step] = []
    append = steps.append
    # (the keys as locals: this loop runs once per step)
    observation_key, action_key, info_key = sc.OBSERVATION, sc.ACTION, sc.INFO
    timestep_name, act_name, env_step_name = sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP
    record_name = sc.STEP_RECORD
    terminated_key, truncated_key, done_key = sc.TERMINATED, sc.TRUNCATED, sc.DONE
    reward_key, discount_key = sc.REWARD, sc.DISCOUNT
    for index in sorted(parts):
        roles = parts[index]
        timestep = roles.get(timestep_name)
        act = roles.get(act_name)
        env_step = roles.get(env_step_name)
        recorded = roles.get(record_name)
        first_call, last_call = roles.get(_FIRST_CALL), roles.get(_LAST_CALL)
        if last_call is first_call:
            last_call = None
        present = [
            r for r in (first_call, last_call, timestep, act, env_step, recorded) if r is not None
        ]
        merged: dict[str, Any] = {}
        infos = []
        for record in present:
            attributes = record.attributes
            merged.update(attributes)
            if info_key in attributes:
                infos.append(attributes[info_key])
        own = trusted is not None and all(r.scope_name == trusted for r in present)

        seen: Any = _MISSING
        if recorded is not None and observation_key in recorded.attributes:
            seen = _text(recorded.attributes[observation_key], own)
        elif act is not None and observation_key in act.attributes:
            seen = _text(act.attributes[observation_key], own)
        elif timestep is not None and observation_key in timestep.attributes:
            seen = _text(timestep.attributes[observation_key], own)
        else:
            seen = returned if index == previous_index + 1 else None
        returned = (
            _text(env_step.attributes[observation_key], own)
            if env_step is not None and observation_key in env_step.attributes
            else None
        )

        terminated = merged.get(terminated_key)
        truncated = merged.get(truncated_key)
        if terminated is None and truncated is None:
            terminated = merged.get(done_key)
        reward = merged.get(reward_key)
        if reward is not None and type(reward) is not float:
            reward = _number(reward, reward_key, index, problems)
        discount = merged.get(discount_key)
        if discount is not None and type(discount) is not float:
            discount = _number(discount, discount_key, index, problems)
        if timestep is not None:
            start, end = timestep.start_time, timestep.end_time
        else:
            start = min(r.start_time for r in present)
            ends = [r.end_time for r in present if r.end_time]
            end = max(ends) if ends else None
        append(
            Step(
                index=index,
                observation=seen,
                action=_text(merged[action_key], own) if action_key in merged else None,
                reward=reward,
                terminated=bool(terminated),
                truncated=bool(truncated),
                discount=discount,
                info=(_text(infos[0], own) if infos else None)
                if len(infos) <= 1
                else _merged_info(infos, own),
                start_time=start,
                end_time=end,
                error=step_error(recorded, env_step, act, timestep),
            )
        )
        previous_index = index
    return steps, returned


_DEEP = "nested deeper than %d levels of lists and objects: kept as its JSON text, " % MAX_DEPTH
_DEEP += '{"$json": text}'


def _note_deep(steps: list[Step], problems: dict[str, str], trajectory: Any = None) -> None:
    """Note each content field that holds its text in the ``$json`` form (codec.MAX_DEPTH)."""
    found: list[str] = []
    for step in steps:
        at = "steps[%d]." % step.index
        found += [at + n for n in ("observation", "action", "info") if _deep(step, n)]
        for where, calls, names in (
            ("llm_calls", step.llm_calls, ("input_messages", "output_messages")),
            ("tool_calls", step.tool_calls, ("arguments", "result")),
        ):
            for number, call in enumerate(calls):
                found += ["%s%s[%d].%s" % (at, where, number, n) for n in names if _deep(call, n)]
    if trajectory is not None:
        found += [n for n in ("final_observation", "reset_info") if _deep(trajectory, n)]
    for path in found:
        problems.setdefault(path, _DEEP)


def _deep(holder: Any, name: str) -> bool:
    return is_deep_json(raw_content(holder, name))


def _number(value: Any, key: str, index: int, problems: dict[str, str]) -> float | None:
    """A step's reward or discount as a float; None (left out, noted) when it is none."""
    problem = value_problem(key, value)
    if problem is None:
        return float(value)
    problems.setdefault("steps[%d].%s" % (index, key.rpartition(".")[2]), left_out(key, problem))
    return None


def _merged_info(infos: list[Any], own: bool) -> Any:
    """The info of a step whose spans have several: dicts merged, later roles winning.

    (A step with one info takes it as it is.) A runner may record info on its timestep
    (``is_trainable``) while the env's step records its own; neither should hide the other.
    """
    infos = [_text(info, own) for info in infos]
    decoded = [decoded_content(info) for info in infos]
    if not all(isinstance(info, dict) for info in decoded):
        return infos[-1]
    merged: dict[str, Any] = {}
    for info in decoded:
        merged.update(info)
    return merged


def _valid_scores(records: Sequence[SpanRecord], episode_id: str | None) -> list[Score]:
    """The scores of score spans; a malformed one is left out (the others count). A score
    span of another tracer read through a conventions mapping (an Agent Lightning reward
    annotation stored without agenttrace) has no rl.episode.id: it joined this episode
    through its parents, so it is this episode's."""
    scores = []
    for record in records:
        if episode_id is not None and sc.EPISODE_ID not in record.attributes:
            record = record._replace(attributes={**record.attributes, sc.EPISODE_ID: episode_id})
        try:
            scores.append(score_from_record(record))
        except ValueError:
            continue
    return scores

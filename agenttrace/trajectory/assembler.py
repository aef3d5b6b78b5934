"""The one assembler: span records -> trajectories.

Pure functions, no I/O, no knowledge of where the records came from. The live
:class:`~agenttrace.processing.TrajectoryProcessor` calls :func:`build_trajectory` with one
episode's records; every storage reader's records are grouped into episodes by
:mod:`agenttrace.trajectory.stream`, which calls it too. So an episode rebuilt live and one
rebuilt from trace storage are equal by construction.

How a step is put together (docs/trajectory-format.md has the full rules):

* spans carrying ``rl.timestep.index`` *i* (timestep, agent.act, env.step) make step *i*;
* the observation the agent acted on comes from agent.act or timestep, else from the previous
  env.step's returned observation (env.reset's for step 0);
* action, reward, termination, discount and info come from env.step, then agent.act, then
  timestep, so the reward sits with the action that earned it;
* GenAI spans (``chat …``, ``execute_tool …``, from agenttrace or any other instrumentation)
  belong to the step whose span is their ancestor, else to the next step; a model call nested
  in another counts once (:mod:`agenttrace.trajectory.genai` reads each span).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.codec import RawJSON, as_raw_json, is_json
from agenttrace.trajectory.lossy import lossy_fields
from agenttrace.trajectory.model import EpisodeError, Step, Trajectory, decoded_content
from agenttrace.trajectory.records import SpanRecord

_STEP_ROLES = (sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP)
# Episode-span attributes that become top-level trajectory fields instead of `attributes`.
_LIFTED = frozenset(
    {sc.EPISODE_ID, sc.TASK_ID, sc.EPISODE_STATUS, sc.EPISODE_RETURN, sc.EPISODE_LENGTH}
)
_MISSING = object()


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
    trusted = trusted_scope
    if not records:
        raise ValueError("build_trajectory needs at least one span record")

    # One pass: the episode span (the outermost, see _episode_span), step parts, reset, GenAI.
    parts: dict[int, dict[str, SpanRecord]] = {}
    episode_span: SpanRecord | None = None
    reset_span: SpanRecord | None = None
    genai_records: list[SpanRecord] = []
    step_roles = _STEP_ROLES
    index_key = sc.TIMESTEP_INDEX
    for record in records:
        name = record.name
        if name in step_roles:
            index = record.attributes.get(index_key)
            if type(index) is int and index >= 0:  # not a bool, nor (below) an int subclass
                roles = parts.get(index)
                if roles is None:
                    parts[index] = {name: record}
                else:
                    roles[name] = record
            elif isinstance(index, int) and not isinstance(index, bool) and index >= 0:
                parts.setdefault(index, {})[name] = record
        elif name == sc.ENV_RESET:
            if reset_span is None or record.start_time >= reset_span.start_time:
                reset_span = record
        else:
            if name == sc.EPISODE and (
                episode_span is None or record.start_time < episode_span.start_time
            ):
                episode_span = record
            if genai.call_kind(record) is not None:
                genai_records.append(record)
    if episode_id is None:
        episode_id = episode_id_of(episode_span or records[0]) or format(
            records[0].trace_id, "032x"
        )

    steps, final_observation = _build_steps(parts, reset_span, trusted)
    if genai_records and steps:
        by_span_id = {record.span_id: record for record in records}
        _attach_genai_calls(steps, genai_records, by_span_id, trusted)

    attrs = episode_span.attributes if episode_span is not None else {}
    length = attrs.get(sc.EPISODE_LENGTH)
    expected = length if isinstance(length, int) else (max(parts) + 1 if parts else 0)
    missing = sorted(set(range(expected)) - set(parts))
    last = steps[-1] if steps else None

    status = attrs.get(sc.EPISODE_STATUS)
    if status is None and episode_span is not None and episode_span.end_time is not None:
        status = _derived_status(episode_span, last)
    ended = episode_span is not None and episode_span.end_time is not None
    attributes = {k: _plain(v) for k, v in attrs.items() if k not in _LIFTED}
    if not ended or missing:
        if status is not None:
            attributes[sc.EPISODE_STATUS] = status
        status = sc.STATUS_INCOMPLETE

    episode_return = attrs.get(sc.EPISODE_RETURN)
    if not isinstance(episode_return, (int, float)) or isinstance(episode_return, bool):
        episode_return = float(sum(s.reward for s in steps if s.reward is not None))
    task_id = attrs.get(sc.TASK_ID)

    start = episode_span.start_time if episode_span else min(r.start_time for r in records)
    if ended:
        end = episode_span.end_time  # type: ignore[union-attr]
    else:
        ends = [r.end_time for r in records if r.end_time is not None]
        end = max(ends) if ends else None

    trajectory = Trajectory(
        episode_id=episode_id,
        trace_id=format((episode_span or records[0]).trace_id, "032x"),
        task_id=None if task_id is None else str(task_id),
        status=status,
        error=_episode_error(episode_span),
        start_time=start,
        end_time=end,
        return_=float(episode_return),
        length=length if isinstance(length, int) else expected,
        attributes=attributes,
        steps=steps,
        final_observation=final_observation,
        reset_info=_content(reset_span, sc.INFO, None, trusted) if reset_span else None,
        missing_steps=missing,
    )
    if trusted is None:  # rebuilt from storage: say what it could not give back whole
        trajectory.lossy = lossy_fields(records, trajectory, _step_finder(records))
    return trajectory


def _step_finder(records: Sequence[SpanRecord]) -> Callable[[SpanRecord], int | None]:
    """``_step_index_of`` over these records, its span index built on first use."""
    by_span_id: dict[int, SpanRecord] = {}

    def step_of(record: SpanRecord) -> int | None:
        if not by_span_id:
            by_span_id.update((r.span_id, r) for r in records)
        return _step_index_of(record, by_span_id)

    return step_of


def _episode_span(records: Sequence[SpanRecord]) -> SpanRecord | None:
    """The episode's root span: a span named ``episode``; the outermost if several."""
    found = None
    for record in records:
        if record.name == sc.EPISODE and (found is None or record.start_time < found.start_time):
            found = record
    return found


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
        return RawJSON(value) if trusted or is_json(value) else value
    if not isinstance(value, str):
        return _plain(value)
    return as_raw_json(value, trusted=trusted)


def _build_steps(
    parts: Mapping[int, Mapping[str, SpanRecord]],
    reset: SpanRecord | None,
    trusted: str | None,
) -> tuple[list[Step], Any]:
    """The steps, in index order, and the observation the last one returned.

    One pass: step i acts on what agent.act/timestep saw, else on what step i-1 (or reset)
    returned; its outcome fields come from env.step, then agent.act, then timestep (one
    merged dict, later roles overriding earlier ones).
    """
    steps: list[Step] = []
    append = steps.append
    returned = _content(reset, sc.OBSERVATION, None, trusted) if reset else None
    previous_index = -1
    # (the keys as locals: this loop runs once per step)
    observation_key, action_key, info_key = sc.OBSERVATION, sc.ACTION, sc.INFO
    timestep_name, act_name, env_step_name = sc.TIMESTEP, sc.AGENT_ACT, sc.ENV_STEP
    terminated_key, truncated_key, done_key = sc.TERMINATED, sc.TRUNCATED, sc.DONE
    reward_key, discount_key = sc.REWARD, sc.DISCOUNT
    for index in sorted(parts):
        roles = parts[index]
        timestep = roles.get(timestep_name)
        act = roles.get(act_name)
        env_step = roles.get(env_step_name)
        present = [r for r in (timestep, act, env_step) if r is not None]
        merged: dict[str, Any] = {}
        infos = []
        for record in present:
            attributes = record.attributes
            merged.update(attributes)
            if info_key in attributes:
                infos.append(attributes[info_key])
        own = trusted is not None and all(r.scope_name == trusted for r in present)

        seen: Any = _MISSING
        if act is not None and observation_key in act.attributes:
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
        discount = merged.get(discount_key)
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
                reward=None if reward is None else float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                discount=None if discount is None else float(discount),
                info=(_text(infos[0], own) if infos else None)
                if len(infos) <= 1
                else _merged_info(infos, own),
                start_time=start,
                end_time=end,
            )
        )
        previous_index = index
    return steps, returned


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


def _step_index_of(record: SpanRecord, by_span_id: Mapping[int, SpanRecord]) -> int | None:
    """Index of the nearest ancestor (or self) that carries rl.timestep.index."""
    current: SpanRecord | None = record
    hops = 0
    while current is not None and hops < 256:
        index = current.attributes.get(sc.TIMESTEP_INDEX)
        if current.name in _STEP_ROLES and isinstance(index, int):
            return index
        if not current.parent_span_id:
            break
        current = by_span_id.get(current.parent_span_id)
        hops += 1
    index = record.attributes.get(sc.TIMESTEP_INDEX)
    return index if isinstance(index, int) else None


def _outermost_model_call(record: SpanRecord, by_span_id: Mapping[int, SpanRecord]) -> SpanRecord:
    """The outermost model-call span around ``record`` (itself when none encloses it)."""
    outer = record
    current = by_span_id.get(record.parent_span_id) if record.parent_span_id else None
    hops = 0
    while current is not None and hops < 256 and current.name not in _STEP_ROLES:
        if genai.call_kind(current) == genai.MODEL_CALL:
            outer = current
        current = by_span_id.get(current.parent_span_id) if current.parent_span_id else None
        hops += 1
    return outer


def _attach_genai_calls(
    steps: list[Step],
    records: list[SpanRecord],
    by_span_id: Mapping[int, SpanRecord],
    trusted: str | None,
) -> None:
    """Fold GenAI spans into their steps (docs/llm-calls.md has the rules).

    * a call under a step span belongs to that step; a call under no step span (before the
      first step, between steps, in env.reset) to the next step to start, else the last step;
      a call whose step span is known but missing is dropped with that step;
    * a model call nested in another model call (openai-v2's span under agenttrace's
      ``llm_call``) is not a second call: it fills what the outer one left empty.
    """
    if not records or not steps:
        return
    by_index = {step.index: step for step in steps}
    starts = sorted((step.start_time or 0, step.index) for step in steps)
    nested: dict[int, list[SpanRecord]] = {}
    calls: list[tuple[SpanRecord, str]] = []
    for record in sorted(records, key=lambda r: r.start_time):
        kind = genai.call_kind(record)
        if kind == genai.MODEL_CALL:
            outer = _outermost_model_call(record, by_span_id)
            if outer is not record:
                nested.setdefault(outer.span_id, []).append(record)
                continue
        calls.append((record, kind))  # type: ignore[arg-type]
    for record, kind in calls:
        index = _step_index_of(record, by_span_id)
        if index is None:
            position = bisect.bisect_left(starts, (record.start_time, -1))
            index = starts[min(position, len(starts) - 1)][1]
        step = by_index.get(index)
        if step is None:
            continue
        if kind == genai.TOOL_CALL:
            step.tool_calls.append(genai.tool_call(record, trusted))
            continue
        call = genai.llm_call(record, trusted)
        inner = nested.get(record.span_id)
        if inner:
            genai.merge_nested(call, [genai.llm_call(r, trusted) for r in inner])
        step.llm_calls.append(call)


def _episode_error(episode_span: SpanRecord | None) -> EpisodeError | None:
    if episode_span is None:
        return None
    for event in reversed(episode_span.events):
        if event.name == sc.EXCEPTION_EVENT:
            attrs = event.attributes
            return EpisodeError(
                type=attrs.get(sc.EXCEPTION_TYPE),
                message=attrs.get(sc.EXCEPTION_MESSAGE),
                stack=attrs.get(sc.EXCEPTION_STACKTRACE),
            )
    if episode_span.status_code == "ERROR":
        return EpisodeError(type=None, message=episode_span.status_message)
    return None


def _derived_status(episode_span: SpanRecord, last: Step | None) -> str:
    """Status of an episode span that did not say (written by another tool)."""
    if episode_span.status_code == "ERROR":
        return sc.STATUS_ERRORED
    if last is not None and last.truncated and not last.terminated:
        return sc.STATUS_TRUNCATED
    if last is None or last.terminated:
        return sc.STATUS_COMPLETED
    return sc.STATUS_TRUNCATED

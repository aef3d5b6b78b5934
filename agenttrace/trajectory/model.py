"""The trajectory model: what an episode looks like to a training pipeline.

One JSON object per episode, tagged ``"schema": "agenttrace.trajectory/1"``; the JSON Schema
is ``agenttrace/trajectory/schema.json`` and the prose is docs/trajectory-format.md.
Times are integers, nanoseconds since the Unix epoch (exact, so live and offline rebuilds
compare equal). Observations, actions, info and LLM content use the value encoding of
:mod:`agenttrace.trajectory.codec`; ``to_dict``/``from_dict`` apply it, so loading a file
back gives equal objects.

``Trajectory.from_dict`` is the one validation of what is read (every loader goes through it):
each field's type and range is checked as it is built, and a record that breaks a rule raises
:class:`TrajectoryFormatError` naming the field (``steps[3].llm_calls[0].finish_reasons``).
The rules, which records are skipped and which values are coerced, are in
docs/trajectory-format.md, "Validation". What loads can be written again (``to_json``, the
JSONL and Parquet sinks) and summarised.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agenttrace.trajectory.codec import (
    RawJSON,
    ValueDecodeError,
    encode,
    json_text,
    loads,
)
from agenttrace.trajectory.equality import values_equal
from agenttrace.trajectory.validate import (
    _TRACE_ID,
    INT64_MAX,
    INT64_MIN,
    TrajectoryFormatError,
    _content,
    _count,
    _fail,
    _finite_numbers,
    _flag,
    _integer,
    _integers,
    _list,
    _named_object,
    _object,
    _real,
    _require,
    _scores,
    _shown,
    _shown_repr,
    _strings,
    _text,
    _text_map,
    _time,
)

_dump_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class _Content:
    """A content field (observation, action, info, messages) that may hold RawJSON text.

    The live rebuild stores attribute text here untouched; the first read decodes it once.
    Writers ask :func:`content_json` for the text, so unread content is never decoded.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__[self.key]
        if type(value) is RawJSON:
            value = obj.__dict__[self.key] = decoded_content(value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.key] = value


def decoded_content(value: Any) -> Any:
    """A content value with RawJSON text decoded (other values as they are)."""
    if type(value) is not RawJSON:
        return value
    try:
        return loads(value)
    except ValueDecodeError:  # valid JSON, malformed tags: keep the plain data
        return json.loads(value)


def raw_content(obj: Any, name: str) -> Any:
    """A content field as stored: RawJSON text stays undecoded."""
    return obj.__dict__["_" + name]


def content_json(obj: Any, name: str) -> str:
    """JSON text of a content field, without decoding it when it is still raw."""
    return json_text(obj.__dict__["_" + name])


def _content_data(obj: Any, name: str) -> Any:
    """Encoded JSON data of a content field (for ``to_dict``)."""
    value = obj.__dict__["_" + name]
    return json.loads(value) if type(value) is RawJSON else encode(value)


def _number_json(value: float | int | None) -> str:
    if value is None:
        return "null"
    if type(value) is float and value - value == 0:  # finite
        return repr(value)
    return _dump_json(encode(value))


def _optional_int_json(value: int | None) -> str:
    return "null" if value is None else "%d" % value


_STEP_JSON = (
    '{"index":%d,"observation":%s,"action":%s,"reward":%s,"terminated":%s,"truncated":%s,'
    '"discount":%s,"info":%s,"start_time":%s,"end_time":%s,"llm_calls":%s,"tool_calls":%s}'
)


def _object_json(pairs: list[tuple[str, str]]) -> str:
    """A JSON object from already-encoded values, keys in the given order."""
    return "{" + ",".join(f'"{key}":{text}' for key, text in pairs) + "}"


SCHEMA = "agenttrace.trajectory/1"
SCHEMA_NAME, _, _SCHEMA_VERSION = SCHEMA.partition("/")
SCHEMA_VERSION = int(_SCHEMA_VERSION)


class _ValueEquality:
    """``==`` over all dataclass fields with numpy- and NaN-aware comparison."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            values_equal(getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class EpisodeError(_ValueEquality):
    """Why an episode errored: the exception that escaped the episode."""

    type: str | None
    message: str | None
    stack: str | None = None

    def to_dict(self) -> dict:
        return {"type": self.type, "message": self.message, "stack": self.stack}

    @classmethod
    def from_dict(cls, data: dict, where: str = "error") -> EpisodeError:
        if type(data) is not dict:
            _fail(where, "an object or null", data)
        return cls(
            type=_text(data.get("type"), where + ".type"),
            message=_text(data.get("message"), where + ".message"),
            stack=_text(data.get("stack"), where + ".stack"),
        )


_TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "completion_logprobs")


@dataclass(eq=False)
class LLMCall(_ValueEquality):
    """One model call (a GenAI ``chat {model}`` span) made inside a step."""

    name: str
    model: str | None = None
    provider: str | None = None
    input_messages: Any = _Content()
    output_messages: Any = _Content()
    finish_reasons: list[str] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    error: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    #: What the server returned with token capture on (docs/tokens.md); in the JSON only then.
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    #: A token list was cut at the tokens_max setting (in the JSON only then).
    tokens_cut: bool = False

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["input_messages"] = _content_data(self, "input_messages")
        data["output_messages"] = _content_data(self, "output_messages")
        data["finish_reasons"] = None if self.finish_reasons is None else list(self.finish_reasons)
        data["attributes"] = encode(self.attributes)
        for key in _TOKEN_FIELDS:
            if data[key] is None:
                del data[key]
            else:
                data[key] = list(data[key])
        if not data["tokens_cut"]:
            del data["tokens_cut"]
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "llm_call") -> LLMCall:
        name = _named_object(data, where)
        get = data.get
        call = cls(
            name=name,
            model=_text(get("model"), where + ".model"),
            provider=_text(get("provider"), where + ".provider"),
            input_messages=_content(get("input_messages"), where + ".input_messages"),
            output_messages=_content(get("output_messages"), where + ".output_messages"),
            finish_reasons=_strings(get("finish_reasons"), where + ".finish_reasons"),
            input_tokens=_count(get("input_tokens"), where + ".input_tokens"),
            output_tokens=_count(get("output_tokens"), where + ".output_tokens"),
            start_time=_time(get("start_time"), where + ".start_time"),
            end_time=_time(get("end_time"), where + ".end_time"),
            error=_text(get("error"), where + ".error"),
            attributes=_object(get("attributes"), where + ".attributes"),
        )
        # Token capture (docs/tokens.md): in the JSON only when recorded.
        prompt, completion = get("prompt_token_ids"), get("completion_token_ids")
        logprobs, cut = get("completion_logprobs"), get("tokens_cut")
        if prompt is not None:
            call.prompt_token_ids = _integers(prompt, where + ".prompt_token_ids", INT64_MIN)
        if completion is not None:
            call.completion_token_ids = _integers(
                completion, where + ".completion_token_ids", INT64_MIN
            )
        if logprobs is not None:
            call.completion_logprobs = _finite_numbers(logprobs, where + ".completion_logprobs")
        if cut is not None:
            call.tokens_cut = _flag(cut, where + ".tokens_cut")
        return call


@dataclass(eq=False)
class ToolCall(_ValueEquality):
    """One tool execution (a GenAI ``execute_tool {name}`` span) made inside a step."""

    name: str
    call_id: str | None = None
    arguments: Any = _Content()
    result: Any = _Content()
    start_time: int | None = None
    end_time: int | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["arguments"] = _content_data(self, "arguments")
        data["result"] = _content_data(self, "result")
        return data

    @classmethod
    def from_dict(cls, data: dict, where: str = "tool_call") -> ToolCall:
        name = _named_object(data, where)
        get = data.get
        return cls(
            name=name,
            call_id=_text(get("call_id"), where + ".call_id"),
            arguments=_content(get("arguments"), where + ".arguments"),
            result=_content(get("result"), where + ".result"),
            start_time=_time(get("start_time"), where + ".start_time"),
            end_time=_time(get("end_time"), where + ".end_time"),
            error=_text(get("error"), where + ".error"),
        )


@dataclass(eq=False)
class Step(_ValueEquality):
    """Step *i*: the observation the agent acted on, its action, and what the action earned."""

    index: int
    observation: Any = _Content()
    action: Any = _Content()
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    discount: float | None = None
    info: Any = _Content()
    start_time: int | None = None
    end_time: int | None = None
    llm_calls: list[LLMCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: The step failed: its env.step, agent.act or step.record span raised (``"Type:
    #: message"``). Its partial data is kept; it earned nothing (docs/trajectory-format.md).
    error: str | None = None

    def to_dict(self) -> dict:
        data = {
            "index": self.index,
            "observation": _content_data(self, "observation"),
            "action": _content_data(self, "action"),
            "reward": encode(self.reward),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "discount": encode(self.discount),
            "info": _content_data(self, "info"),
            "start_time": self.start_time,
            "end_time": self.end_time,
            "llm_calls": [call.to_dict() for call in self.llm_calls],
            "tool_calls": [call.to_dict() for call in self.tool_calls],
        }
        if self.error is not None:
            data["error"] = self.error
        return data

    def to_json(self) -> str:
        """Same document as ``to_dict``, with raw content spliced in undecoded."""
        text = _STEP_JSON % (
            self.index,
            content_json(self, "observation"),
            content_json(self, "action"),
            _number_json(self.reward),
            "true" if self.terminated else "false",
            "true" if self.truncated else "false",
            _number_json(self.discount),
            content_json(self, "info"),
            _optional_int_json(self.start_time),
            _optional_int_json(self.end_time),
            _dump_json([c.to_dict() for c in self.llm_calls]) if self.llm_calls else "[]",
            _dump_json([c.to_dict() for c in self.tool_calls]) if self.tool_calls else "[]",
        )
        if self.error is None:
            return text
        return text[:-1] + ',"error":' + _dump_json(self.error) + "}"

    @classmethod
    def from_dict(cls, data: dict, where: str = "step") -> Step:
        if type(data) is not dict:
            _fail(where, "an object", data)
        if "index" not in data:
            raise TrajectoryFormatError(f"{where} is missing required key(s): index", field=where)
        get = data.get
        index = data["index"]
        if type(index) is not int or not 0 <= index <= INT64_MAX:
            index = _integer(index, where + ".index", 0, "an integer >= 0")
        reward, discount = get("reward"), get("discount")
        if reward is not None and type(reward) is not float:
            reward = _real(reward, where + ".reward", optional=True)
        if discount is not None and type(discount) is not float:
            discount = _real(discount, where + ".discount", optional=True)
        terminated, truncated = get("terminated", False), get("truncated", False)
        if terminated is not False and terminated is not True:
            _fail(where + ".terminated", "true or false", terminated)
        if truncated is not False and truncated is not True:
            _fail(where + ".truncated", "true or false", truncated)
        llm_calls = _list(get("llm_calls"), where + ".llm_calls", "a list of model calls")
        tool_calls = _list(get("tool_calls"), where + ".tool_calls", "a list of tool calls")
        return cls(
            index=index,
            observation=_content(get("observation"), where + ".observation"),
            action=_content(get("action"), where + ".action"),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            discount=discount,
            info=_content(get("info"), where + ".info"),
            start_time=_time(get("start_time"), where + ".start_time"),
            end_time=_time(get("end_time"), where + ".end_time"),
            llm_calls=[
                LLMCall.from_dict(call, f"{where}.llm_calls[{number}]")
                for number, call in enumerate(llm_calls)
            ]
            if llm_calls
            else [],
            tool_calls=[
                ToolCall.from_dict(call, f"{where}.tool_calls[{number}]")
                for number, call in enumerate(tool_calls)
            ]
            if tool_calls
            else [],
            error=_text(get("error"), where + ".error"),
        )


@dataclass(eq=False)
class Trajectory(_ValueEquality):
    """One episode, rebuilt from its spans."""

    episode_id: str
    trace_id: str | None = None
    task_id: str | None = None
    status: str = "completed"
    error: EpisodeError | None = None
    start_time: int | None = None
    end_time: int | None = None
    return_: float = 0.0
    length: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    final_observation: Any = _Content()
    reset_info: Any = _Content()
    #: Step indices known to exist but whose spans never arrived (status is then incomplete).
    missing_steps: list[int] = field(default_factory=list)
    #: Fields the trace storage cut or lost (field path -> reason); empty when rebuilt whole.
    lossy: dict[str, str] = field(default_factory=dict)
    #: Scores given to the episode (name -> value; agenttrace.trajectory.scores), in the JSON
    #: only when there are some.
    scores: dict[str, float] = field(default_factory=dict)
    schema: str = SCHEMA

    @property
    def rewards(self) -> list[float | None]:
        return [step.reward for step in self.steps]

    def __eq__(self, other: object) -> bool:
        """Field by field; ``steps`` as sequences, so steps held on disk (a long episode's
        :class:`~agenttrace.trajectory.spill.SpilledSteps`) equal the same steps in a list."""
        if type(other) is not type(self):
            return NotImplemented
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "steps":
                if len(mine) != len(theirs) or not all(
                    values_equal(a, b) for a, b in zip(mine, theirs, strict=True)
                ):
                    return False
            elif not values_equal(mine, theirs):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict:
        """JSON-ready dict in the documented key order."""
        return {
            "schema": self.schema,
            "episode_id": self.episode_id,
            "trace_id": self.trace_id,
            "task_id": self.task_id,
            "status": self.status,
            "error": self.error.to_dict() if self.error else None,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "return": encode(self.return_),
            "length": self.length,
            "attributes": encode(self.attributes),
            "steps": [step.to_dict() for step in self.steps],
            "final_observation": _content_data(self, "final_observation"),
            "reset_info": _content_data(self, "reset_info"),
            "missing_steps": list(self.missing_steps),
            "lossy": dict(self.lossy),
            **({"scores": dict(self.scores)} if self.scores else {}),
        }

    def to_json(self) -> str:
        """One line of JSON (no newline); raw step content is spliced in undecoded."""
        return _object_json(
            self._json_pairs("[" + ",".join([s.to_json() for s in self.steps]) + "]")
        )

    def json_parts(self) -> Iterator[str]:
        """``to_json`` in pieces, one step at a time: how a long episode's line is written
        without holding it (steps on disk give their stored text)."""
        pairs = self._json_pairs("[]")
        at = [key for key, _ in pairs].index("steps")
        head, tail = _object_json(pairs[:at]), _object_json(pairs[at + 1 :])
        yield head[:-1] + ',"steps":['
        texts = getattr(self.steps, "json_texts", None)
        for number, text in enumerate(texts() if texts else (s.to_json() for s in self.steps)):
            yield "," + text if number else text
        yield "]," + tail[1:]

    def _json_pairs(self, steps_json: str) -> list[tuple[str, str]]:
        return [
            ("schema", _dump_json(self.schema)),
            ("episode_id", _dump_json(self.episode_id)),
            ("trace_id", _dump_json(self.trace_id)),
            ("task_id", _dump_json(self.task_id)),
            ("status", _dump_json(self.status)),
            ("error", _dump_json(self.error.to_dict() if self.error else None)),
            ("start_time", _optional_int_json(self.start_time)),
            ("end_time", _optional_int_json(self.end_time)),
            ("return", _number_json(self.return_)),
            ("length", "%d" % self.length),
            ("attributes", _dump_json(encode(self.attributes))),
            ("steps", steps_json),
            ("final_observation", content_json(self, "final_observation")),
            ("reset_info", content_json(self, "reset_info")),
            ("missing_steps", _dump_json(list(self.missing_steps))),
            ("lossy", _dump_json(self.lossy) if self.lossy else "{}"),
            *([("scores", _dump_json(self.scores))] if self.scores else []),
        ]

    @classmethod
    def from_dict(cls, data: dict) -> Trajectory:
        """The trajectory of a JSON document, every field checked as it is built.

        Raises :class:`TrajectoryFormatError` naming the first field that breaks a rule
        (docs/trajectory-format.md, "Validation"); what it returns can be written again and
        summarised.
        """
        if not isinstance(data, dict):
            raise TrajectoryFormatError(f"a trajectory is a JSON object, got {_shown(data)}")
        _require(data, REQUIRED_KEYS, "trajectory")
        schema = data["schema"]
        name, _, version = schema.partition("/") if type(schema) is str else ("", "", "")
        if (
            name != SCHEMA_NAME
            or not (version.isascii() and version.isdigit() and len(version) < 10)
            or int(version) > SCHEMA_VERSION
        ):
            raise TrajectoryFormatError(
                f"unsupported schema {_shown_repr.repr(schema)}: this agenttrace reads "
                f"{SCHEMA} and older",
                field="schema",
            )
        episode_id = data["episode_id"]
        if type(episode_id) is not str:
            _fail("episode_id", "a string", episode_id)
        try:
            return cls._checked(data, schema, episode_id)
        except TrajectoryFormatError as exc:
            raise TrajectoryFormatError(
                f"episode {_shown_repr.repr(episode_id)}: {exc}", field=exc.field
            ) from exc
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a check missed
            raise TrajectoryFormatError(
                f"episode {_shown_repr.repr(episode_id)}: malformed field: {exc}"
            ) from exc

    @classmethod
    def _checked(cls, data: dict, schema: str, episode_id: str) -> Trajectory:
        get = data.get
        trace_id, task_id, status = data["trace_id"], data["task_id"], data["status"]
        if trace_id is not None and (
            type(trace_id) is not str or not _TRACE_ID.fullmatch(trace_id)
        ):
            _fail("trace_id", "32 lower-case hex digits or null", trace_id)
        if task_id is not None and type(task_id) is not str:
            _fail("task_id", "a string or null", task_id)
        if type(status) is not str:
            _fail("status", "a string", status)
        error = data["error"]
        if error is not None and not (type(error) is dict and not error):  # {}: no error
            error = EpisodeError.from_dict(error)
        else:
            error = None
        return_ = data["return"]
        if type(return_) is not float:
            return_ = _real(return_, "return", optional=False)
        length = data["length"]
        if type(length) is not int or not 0 <= length <= INT64_MAX:
            length = _integer(length, "length", 0, "an integer >= 0")
        steps = data["steps"]
        if type(steps) is not list:
            _fail("steps", "a list of steps", steps)
        missing_steps = get("missing_steps")
        return cls(
            schema=schema,
            episode_id=episode_id,
            trace_id=trace_id,
            task_id=task_id,
            status=status,
            error=error,
            start_time=_time(data["start_time"], "start_time"),
            end_time=_time(data["end_time"], "end_time"),
            return_=return_,
            length=length,
            attributes=_object(data["attributes"], "attributes"),
            steps=[Step.from_dict(step, f"steps[{number}]") for number, step in enumerate(steps)],
            final_observation=_content(data["final_observation"], "final_observation"),
            reset_info=_content(get("reset_info"), "reset_info"),
            missing_steps=[]
            if missing_steps is None
            else list(_integers(missing_steps, "missing_steps", 0)),
            lossy=_text_map(get("lossy"), "lossy"),
            scores=_scores(get("scores")),
        )

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TrajectoryFormatError(f"not JSON: {exc}") from exc
        except RecursionError:
            raise TrajectoryFormatError(
                "not readable JSON: nested too deeply (over Python's recursion limit)"
            ) from None
        return cls.from_dict(data)


REQUIRED_KEYS = (
    "schema",
    "episode_id",
    "trace_id",
    "task_id",
    "status",
    "error",
    "start_time",
    "end_time",
    "return",
    "length",
    "attributes",
    "steps",
    "final_observation",
)

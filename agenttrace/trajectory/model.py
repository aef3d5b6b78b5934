"""The trajectory model: what an episode looks like to a training pipeline.

One JSON object per episode, tagged ``"schema": "agenttrace.trajectory/1"``; the JSON Schema
is ``agenttrace/trajectory/schema.json`` and the prose is docs/trajectory-format.md.
Times are integers, nanoseconds since the Unix epoch (exact, so live and offline rebuilds
compare equal). Observations, actions, info and LLM content use the value encoding of
:mod:`agenttrace.trajectory.codec`; ``to_dict``/``from_dict`` apply it, so loading a file
back gives equal objects.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from agenttrace.trajectory.codec import decode, encode, values_equal

_dump_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

SCHEMA = "agenttrace.trajectory/1"
SCHEMA_NAME, _, _SCHEMA_VERSION = SCHEMA.partition("/")
SCHEMA_VERSION = int(_SCHEMA_VERSION)


class TrajectoryFormatError(ValueError):
    """A trajectory document does not follow the schema (the message says where)."""


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
    def from_dict(cls, data: dict) -> EpisodeError:
        return cls(type=data.get("type"), message=data.get("message"), stack=data.get("stack"))


@dataclass(eq=False)
class LLMCall(_ValueEquality):
    """One model call (a GenAI ``chat {model}`` span) made inside a step."""

    name: str
    model: str | None = None
    provider: str | None = None
    input_messages: Any = None
    output_messages: Any = None
    finish_reasons: list[str] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    start_time: int | None = None
    end_time: int | None = None
    error: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["input_messages"] = encode(self.input_messages)
        data["output_messages"] = encode(self.output_messages)
        data["attributes"] = encode(self.attributes)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> LLMCall:
        values = _known_fields(cls, data)
        for key in ("input_messages", "output_messages", "attributes"):
            if key in values:
                values[key] = decode(values[key])
        return cls(**values)


@dataclass(eq=False)
class ToolCall(_ValueEquality):
    """One tool execution (a GenAI ``execute_tool {name}`` span) made inside a step."""

    name: str
    call_id: str | None = None
    arguments: Any = None
    result: Any = None
    start_time: int | None = None
    end_time: int | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["arguments"] = encode(self.arguments)
        data["result"] = encode(self.result)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ToolCall:
        values = _known_fields(cls, data)
        for key in ("arguments", "result"):
            if key in values:
                values[key] = decode(values[key])
        return cls(**values)


@dataclass(eq=False)
class Step(_ValueEquality):
    """Step *i*: the observation the agent acted on, its action, and what the action earned."""

    index: int
    observation: Any = None
    action: Any = None
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    discount: float | None = None
    info: Any = None
    start_time: int | None = None
    end_time: int | None = None
    llm_calls: list[LLMCall] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "observation": encode(self.observation),
            "action": encode(self.action),
            "reward": encode(self.reward),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "discount": encode(self.discount),
            "info": encode(self.info),
            "start_time": self.start_time,
            "end_time": self.end_time,
            "llm_calls": [call.to_dict() for call in self.llm_calls],
            "tool_calls": [call.to_dict() for call in self.tool_calls],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Step:
        _require(data, ("index",), "step")
        return cls(
            index=data["index"],
            observation=decode(data.get("observation")),
            action=decode(data.get("action")),
            reward=decode(data.get("reward")),
            terminated=bool(data.get("terminated", False)),
            truncated=bool(data.get("truncated", False)),
            discount=decode(data.get("discount")),
            info=decode(data.get("info")),
            start_time=data.get("start_time"),
            end_time=data.get("end_time"),
            llm_calls=[LLMCall.from_dict(c) for c in data.get("llm_calls") or ()],
            tool_calls=[ToolCall.from_dict(c) for c in data.get("tool_calls") or ()],
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
    final_observation: Any = None
    reset_info: Any = None
    #: Step indices known to exist but whose spans never arrived (status is then incomplete).
    missing_steps: list[int] = field(default_factory=list)
    schema: str = SCHEMA

    @property
    def rewards(self) -> list[float | None]:
        return [step.reward for step in self.steps]

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
            "final_observation": encode(self.final_observation),
            "reset_info": encode(self.reset_info),
            "missing_steps": list(self.missing_steps),
        }

    def to_json(self) -> str:
        return json.dumps(
            self.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )

    @classmethod
    def from_dict(cls, data: dict) -> Trajectory:
        if not isinstance(data, dict):
            raise TrajectoryFormatError(f"a trajectory is a JSON object, got {type(data).__name__}")
        _require(data, REQUIRED_KEYS, "trajectory")
        schema = data["schema"]
        name, _, version = str(schema).partition("/")
        if name != SCHEMA_NAME or not version.isdigit() or int(version) > SCHEMA_VERSION:
            raise TrajectoryFormatError(
                f"unsupported schema {schema!r}: this agenttrace reads {SCHEMA} and older"
            )
        error = data["error"]
        try:
            return cls(
                schema=schema,
                episode_id=data["episode_id"],
                trace_id=data["trace_id"],
                task_id=data["task_id"],
                status=data["status"],
                error=EpisodeError.from_dict(error) if error else None,
                start_time=data["start_time"],
                end_time=data["end_time"],
                return_=decode(data["return"]),
                length=data["length"],
                attributes=decode(data["attributes"]) or {},
                steps=[Step.from_dict(step) for step in data["steps"]],
                final_observation=decode(data["final_observation"]),
                reset_info=decode(data.get("reset_info")),
                missing_steps=list(data.get("missing_steps") or ()),
            )
        except TrajectoryFormatError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise TrajectoryFormatError(
                f"episode {data.get('episode_id')!r}: malformed field: {exc}"
            ) from exc

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TrajectoryFormatError(f"not JSON: {exc}") from exc
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


def _require(data: dict, keys: tuple[str, ...], what: str) -> None:
    missing = [key for key in keys if key not in data]
    if missing:
        raise TrajectoryFormatError(f"{what} is missing required key(s): {', '.join(missing)}")


def _known_fields(cls: type, data: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in data.items() if key in names}

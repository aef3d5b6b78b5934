"""Conventions mappings: spans that other tracers wrote, read as agenttrace's.

A runner with its own tracer names its spans and attributes its own way (``episode`` with
``task_id``, ``timestep`` with ``timestep_idx``, ``env.step`` with plain ``reward`` and
``done``); agent frameworks follow OpenInference, OpenLLMetry or the GenAI agent spans. A
:class:`Conventions` says which spans play which role and which attributes hold which field;
:meth:`Conventions.translate` rewrites one span record into agenttrace's names
(:mod:`agenttrace.semconv`) *before* the assembler sees it, in the live processor and in every
storage reader alike, so the assembler keeps one vocabulary. Spans no rule matches, and
agenttrace's own, pass through untouched.

An episode span of another tracer has no ``rl.episode.id``: it gets one derived from its own
trace and span id (:func:`derived_episode_id`), the same live (stamped when the span starts,
so its descendants carry it) and offline (where descendants join it through their parents).

Presets (:data:`PRESETS`) cover the runner style, OpenTelemetry GenAI agent spans,
OpenInference, OpenLLMetry/Traceloop and Agent Lightning's reward annotations; a TOML or JSON
file adds rules of its own (docs/conventions.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.foreign_formats import FORMATS
from agenttrace.trajectory.records import SpanEvent, SpanRecord

#: Roles a rule can give a span, and the span name each becomes (model and tool calls keep
#: their names: ``gen_ai.operation.name`` says what they are).
ROLE_NAMES: dict[str, str | None] = {
    "episode": sc.EPISODE,
    "env.reset": sc.ENV_RESET,
    "timestep": sc.TIMESTEP,
    "agent.act": sc.AGENT_ACT,
    "env.step": sc.ENV_STEP,
    "llm": None,
    "tool": None,
    "score": sc.SCORE,
}
#: Fields an attribute can be mapped to -> the agenttrace attribute each becomes.
#: ``error`` (text) fails the span instead; ``attributes.NAME`` is an episode attribute.
FIELDS: dict[str, str] = {
    "reward": sc.REWARD,
    "done": sc.DONE,
    "terminated": sc.TERMINATED,
    "truncated": sc.TRUNCATED,
    "discount": sc.DISCOUNT,
    "timestep_index": sc.TIMESTEP_INDEX,
    "task_id": sc.TASK_ID,
    "episode_id": sc.EPISODE_EXTERNAL_ID,
    "observation": sc.OBSERVATION,
    "action": sc.ACTION,
    "info": sc.INFO,
    "error": "",
}
_ATTRIBUTE_FIELD = "attributes."
_NUMBERS = (sc.REWARD, sc.DISCOUNT)
_FLAGS = (sc.DONE, sc.TERMINATED, sc.TRUNCATED)
#: The span name a translated span had before (a rule renamed it to its role's).
ORIGINAL_NAME = "agenttrace.span.name"
_OWN_PREFIXES = ("rl.", "gen_ai.")  # keys a mapping may read but never drops
_GOLDEN = 0x9E3779B97F4A7C15  # spreads the span ids of several scores from one span apart
_SPAN_ID_MASK = (1 << 64) - 1


class ConventionsError(ValueError):
    """A conventions mapping cannot be used; the message says which entry and why."""


def derived_episode_id(trace_id: int, span_id: int) -> str:
    """The episode id of another tracer's episode span: its trace and span id, in hex."""
    return f"{trace_id:032x}-{span_id:016x}"


@dataclass(frozen=True)
class SpanRule:
    """Spans of one role: matched by exact ``name``, ``name_prefix``, and/or an
    ``attribute`` whose value is one of ``values`` (any value when empty). ``root_only``:
    only spans with no parent in their process (root, or a remote parent), so an agent span
    nested in another is not a second episode. ``format`` reads a structured format
    (:data:`agenttrace.trajectory.foreign_formats.FORMATS`)."""

    role: str
    name: str | None = None
    name_prefix: str | None = None
    attribute: str | None = None
    values: tuple[str, ...] = ()
    root_only: bool = False
    format: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLE_NAMES:
            raise ConventionsError(
                f"span rule: unknown role {self.role!r}; use one of {', '.join(ROLE_NAMES)}"
            )
        if self.name is None and self.name_prefix is None and self.attribute is None:
            raise ConventionsError(
                f"span rule for role {self.role}: give name, name_prefix or attribute"
            )
        if self.format is not None:
            known = FORMATS.get(self.format)
            if known is None:
                raise ConventionsError(
                    f"span rule for role {self.role}: unknown format {self.format!r}; use one "
                    f"of {', '.join(FORMATS)}"
                )
            if known[0] != self.role:
                raise ConventionsError(
                    f"span rule: format {self.format} reads role {known[0]}, not {self.role}"
                )
        object.__setattr__(self, "values", tuple(str(value) for value in self.values))

    def matches(self, name: str, attributes: Mapping[str, Any], is_root: bool) -> bool:
        if self.root_only and not is_root:
            return False
        if self.name is not None and name != self.name:
            return False
        if self.name_prefix is not None and not name.startswith(self.name_prefix):
            return False
        if self.attribute is not None:
            value = attributes.get(self.attribute)
            if value is None or (self.values and str(value) not in self.values):
                return False
        return True


@dataclass(frozen=True)
class Conventions:
    """Span rules (first match wins) and field mappings (our field -> their keys, the first
    present wins), made from presets and files; ``sources`` names them for messages."""

    spans: tuple[SpanRule, ...] = ()
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, keys in self.fields.items():
            if name not in FIELDS and not _is_attribute_field(name):
                raise ConventionsError(
                    f"field {name!r} is not one agenttrace reads; use one of "
                    f"{', '.join(FIELDS)} or attributes.NAME"
                )
            if not keys or not all(isinstance(key, str) and key for key in keys):
                raise ConventionsError(f"field {name}: give the attribute name(s) that hold it")

    def __bool__(self) -> bool:
        return bool(self.spans)

    def combined(self, other: Conventions) -> Conventions:
        """Both mappings: this one's rules first; a field's keys from both, this one's first."""
        fields = {name: keys for name, keys in self.fields.items()}
        for name, keys in other.fields.items():
            fields[name] = tuple(dict.fromkeys((*fields.get(name, ()), *keys)))
        return Conventions((*self.spans, *other.spans), fields, (*self.sources, *other.sources))

    def rule_for(self, name: str, attributes: Mapping[str, Any], is_root: bool) -> SpanRule | None:
        for rule in self.spans:
            if rule.matches(name, attributes, is_root):
                return rule
        return None

    def starts_episode(self, name: str, attributes: Mapping[str, Any], is_root: bool) -> bool:
        """Whether a span of another tracer, as it starts, is an episode (live processor)."""
        rule = self.rule_for(name, attributes, is_root)
        return rule is not None and rule.role == "episode"

    def translate(self, record: SpanRecord) -> list[SpanRecord]:
        """``record`` in agenttrace's names (several records for a span of several scores);
        ``[record]`` as it is when no rule matches or it is agenttrace's own."""
        if record.scope_name == sc.INSTRUMENTATION_SCOPE:
            return [record]
        is_root = record.parent_span_id == 0 or record.parent_is_remote
        rule = self.rule_for(record.name, record.attributes, is_root)
        if rule is None:
            return [record]
        attributes = dict(record.attributes)
        changes: dict[str, Any] = {}
        if rule.format is not None:
            converted = FORMATS[rule.format][1](record.attributes)
            if rule.role == "score":
                return _score_records(record, converted)
            for key, value in converted.items():
                attributes.setdefault(key, value)
        error = self._map_fields(rule.role, attributes)
        if rule.role == "llm":
            attributes.setdefault(sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_OPERATION_CHAT)
        elif rule.role == "tool":
            attributes.setdefault(sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_OPERATION_EXECUTE_TOOL)
        elif rule.role == "episode" and sc.EPISODE_ID not in attributes:
            attributes[sc.EPISODE_ID] = derived_episode_id(record.trace_id, record.span_id)
        new_name = ROLE_NAMES[rule.role]
        if new_name is not None and new_name != record.name:
            attributes.setdefault(ORIGINAL_NAME, record.name)
            changes["name"] = new_name
        if error is True and record.status_code != "ERROR":
            # A flag: failed, with no message (the exception on the span, or on the failed
            # step span that caused it, says why: outcome.episode_error).
            changes["status_code"] = "ERROR"
        elif error is not None and record.status_code != "ERROR":
            kind, message = _error_parts(error)
            changes["status_code"] = "ERROR"
            changes["status_message"] = message
            if rule.role == "episode" and not _has_exception(record):
                exception = {sc.EXCEPTION_MESSAGE: message}
                if kind is not None:
                    exception[sc.EXCEPTION_TYPE] = kind
                event = SpanEvent(
                    sc.EXCEPTION_EVENT, record.end_time or record.start_time, exception
                )
                changes["events"] = (*record.events, event)
        return [record._replace(attributes=attributes, **changes)]

    def _map_fields(self, role: str, attributes: dict[str, Any]) -> str | bool | None:
        """Move each mapped field the span has to agenttrace's key (the attribute it came from
        is dropped: the trajectory shows it once); returns a mapped error (text, or True for
        a boolean flag)."""
        error = None
        for name, keys in self.fields.items():
            found = next((key for key in keys if key in attributes), None)
            if found is None:
                continue
            value = attributes[found]
            if name == "error":
                if value not in ("", False, None):
                    error = value if isinstance(value, str) or value is True else _text(value)
                    del attributes[found]
                continue
            if _is_attribute_field(name):
                if role == "episode":
                    ours = name[len(_ATTRIBUTE_FIELD) :]
                    attributes.setdefault(ours, _plain(value))
                    if ours != found:
                        del attributes[found]
                continue
            key = FIELDS[name]
            if key in attributes:
                continue  # agenttrace's own key wins; theirs stays as it was
            value = _typed(key, value)
            if value is None:
                continue  # not usable as that field: kept as it was
            attributes[key] = value
            if not found.startswith(_OWN_PREFIXES):
                del attributes[found]
        return error

    def describe(self) -> str:
        return ", ".join(self.sources) or "(empty)"


def _is_attribute_field(name: str) -> bool:
    rest = name[len(_ATTRIBUTE_FIELD) :]
    return name.startswith(_ATTRIBUTE_FIELD) and bool(rest) and not rest.startswith("rl.")


def _text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _error_parts(error: str) -> tuple[str | None, str]:
    """Type and message of a mapped error: JSON ``{"type", "message"}`` text, else text."""
    if error.startswith("{"):
        try:
            data = json.loads(error)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            kind = data.get("type")
            return (kind if isinstance(kind, str) else None), data["message"]
    return None, error


def _has_exception(record: SpanRecord) -> bool:
    return any(event.name == sc.EXCEPTION_EVENT for event in record.events)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _typed(key: str, value: Any) -> Any:
    """A mapped value as agenttrace's key expects it; None when it cannot be (left out)."""
    if key in _NUMBERS:
        if isinstance(value, bool):
            return float(value)
        if not isinstance(value, (int, float, str)):
            return None
        try:
            number = float(value)
        except (ValueError, OverflowError):  # (text that is no number; 10**400)
            return None
        return number if math.isfinite(number) else None
    if key in _FLAGS:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        return None
    if key == sc.TIMESTEP_INDEX:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value if value >= 0 else None
        if isinstance(value, (float, str)):
            try:
                number = float(value)
            except ValueError:
                return None
            return int(number) if number.is_integer() and number >= 0 else None
        return None
    if key in (sc.TASK_ID, sc.EPISODE_EXTERNAL_ID):
        return value if isinstance(value, str) else _text(value)
    if key in (sc.OBSERVATION, sc.ACTION, sc.INFO):
        return value if isinstance(value, str) else _text(_plain(value))
    return value


def _score_records(record: SpanRecord, scores: list[dict[str, Any]]) -> list[SpanRecord]:
    """One ``score`` record per score of an annotation span (none: the span as it is)."""
    if not scores:
        return [record]
    out = []
    for position, score in enumerate(scores):
        attributes = dict(score)
        for key in (sc.EPISODE_ID, sc.SCORE_STEP):
            if key in record.attributes:
                attributes.setdefault(key, record.attributes[key])
        attributes[ORIGINAL_NAME] = record.name
        span_id = record.span_id
        if position:
            span_id = (record.span_id ^ (_GOLDEN * position)) & _SPAN_ID_MASK or 1
        out.append(
            record._replace(name=sc.SCORE, span_id=span_id, attributes=attributes, events=())
        )
    return out


# --- presets ----------------------------------------------------------------------------------

_EPISODE_FIELDS = {"task_id": ("task_id",), "episode_id": ("episode_id",)}

#: Built-in mappings, by name (docs/conventions.md shows each in full).
PRESETS: dict[str, Conventions] = {
    # A runner with its own tracer (the Ray Runner of the design brief): agenttrace's span
    # names with plain attribute names.
    "runner": Conventions(
        (
            SpanRule("episode", name="episode"),
            SpanRule("env.reset", name="env.reset"),
            SpanRule("timestep", name="timestep"),
            SpanRule("agent.act", name="agent.act"),
            SpanRule("env.step", name="env.step"),
        ),
        {
            "reward": ("reward",),
            "done": ("done",),
            "terminated": ("terminated",),
            "truncated": ("truncated",),
            "timestep_index": ("timestep_idx", "timestep_index"),
            "observation": ("observation",),
            "action": ("action",),
            "info": ("info",),
            "error": ("error_info", "error"),
            "attributes.reset_kwargs": ("reset_kwargs",),
            **_EPISODE_FIELDS,
        },
        ("runner",),
    ),
    # OpenTelemetry GenAI agent spans: an invoke_agent span with no parent in its process is
    # the episode, and so is an invoke_workflow span (opentelemetry-util-genai's workflow(),
    # around the agents it runs); their chat and execute_tool spans are read as they are.
    "genai": Conventions(
        (
            SpanRule(
                "episode",
                attribute=sc.GEN_AI_OPERATION_NAME,
                values=("invoke_agent", "invoke_workflow"),
                root_only=True,
            ),
            SpanRule("episode", name_prefix="invoke_agent", root_only=True),
            SpanRule("episode", name_prefix="invoke_workflow", root_only=True),
        ),
        {"episode_id": (sc.GEN_AI_CONVERSATION_ID,)},
        ("genai",),
    ),
    # Arize OpenInference: a root AGENT (or CHAIN) span is the episode; LLM and TOOL spans are
    # model and tool calls in its flattened message format.
    "openinference": Conventions(
        (
            SpanRule(
                "episode",
                attribute="openinference.span.kind",
                values=("AGENT", "CHAIN"),
                root_only=True,
            ),
            SpanRule(
                "llm",
                attribute="openinference.span.kind",
                values=("LLM",),
                format="openinference.llm",
            ),
            SpanRule(
                "tool",
                attribute="openinference.span.kind",
                values=("TOOL",),
                format="openinference.tool",
            ),
        ),
        {"task_id": ("session.id",)},
        ("openinference",),
    ),
    # OpenLLMetry (Traceloop): a root workflow or agent span is the episode, tool spans are
    # tool calls; its model-call spans (GenAI keys, or llm.request.type) are read as they are.
    # traceloop-sdk sets traceloop.span.kind just after the span starts; as it starts, the
    # SDK's own span processor (added before agenttrace's by Traceloop.init) gives it
    # traceloop.workflow.name (an @workflow) or gen_ai.agent.name (an @agent): those make the
    # live episode, so its spans join it.
    "traceloop": Conventions(
        (
            SpanRule(
                "episode",
                attribute="traceloop.span.kind",
                values=("workflow", "agent"),
                root_only=True,
            ),
            SpanRule("episode", attribute="traceloop.workflow.name", root_only=True),
            SpanRule("episode", attribute="gen_ai.agent.name", root_only=True),
            SpanRule(
                "tool",
                attribute="traceloop.span.kind",
                values=("tool",),
                format="traceloop.tool",
            ),
        ),
        {"task_id": ("traceloop.association.properties.task_id",)},
        ("traceloop",),
    ),
    # Agent Lightning's reward annotations: named reward/value pairs, the first the primary.
    "agentlightning": Conventions(
        (
            SpanRule("score", name="agentlightning.annotation", format="agentlightning.reward"),
            SpanRule("score", name="agentlightning.reward", format="agentlightning.reward"),
        ),
        {},
        ("agentlightning",),
    ),
}
PRESETS["openllmetry"] = PRESETS["traceloop"]


# --- reading a mapping -------------------------------------------------------------------------

_FILE_SUFFIXES = (".toml", ".json")
_RULE_KEYS = ("role", "name", "name_prefix", "attribute", "values", "root_only", "format")


def conventions_from_value(value: Conventions | str | Iterable[str] | None) -> Conventions:
    """A mapping from presets and files: ``"runner,openinference"``, ``"my.toml"``, a list
    of such, or a :class:`Conventions`. An empty value is an empty mapping."""
    if value is None:
        return Conventions()
    if isinstance(value, Conventions):
        return value
    items: Sequence[str]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    else:
        items = [str(part).strip() for part in value]
    result = Conventions()
    for item in items:
        if not item:
            continue
        if item in PRESETS:
            result = result.combined(PRESETS[item])
        elif item.lower().endswith(_FILE_SUFFIXES) or "/" in item or "\\" in item:
            result = result.combined(read_conventions_file(item))
        else:
            raise ConventionsError(
                f"conventions: {item!r} is neither a preset ({', '.join(PRESETS)}) nor a "
                ".toml or .json file"
            )
    return result


def read_conventions_file(path: str | Path) -> Conventions:
    """A mapping from a TOML or JSON file (format: docs/conventions.md)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConventionsError(f"conventions file {file}: cannot be read: {exc}") from None
    try:
        if file.suffix.lower() == ".toml":
            import tomllib

            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        kind = "TOML" if file.suffix.lower() == ".toml" else "JSON"
        raise ConventionsError(f"conventions file {file}: not valid {kind}: {exc}") from None
    try:
        return conventions_from_table(data, source=str(file))
    except ConventionsError as exc:
        raise ConventionsError(f"conventions file {file}: {exc}") from None


def conventions_from_table(data: Any, *, source: str = "table") -> Conventions:
    """A mapping from a parsed table: ``presets``, ``spans`` (rules) and ``fields``,
    optionally under a ``conventions`` key."""
    if isinstance(data, Mapping) and isinstance(data.get("conventions"), Mapping):
        data = data["conventions"]
    if not isinstance(data, Mapping):
        raise ConventionsError("expected a table with presets, spans and fields")
    unknown = sorted(set(data) - {"presets", "spans", "fields"})
    if unknown:
        raise ConventionsError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; use presets, spans, fields"
        )
    presets = data.get("presets", [])
    if isinstance(presets, str):
        presets = [presets]
    if not isinstance(presets, list) or not all(isinstance(p, str) for p in presets):
        raise ConventionsError("presets: expected a list of preset names")
    for name in presets:
        if name not in PRESETS:
            raise ConventionsError(f"presets: unknown preset {name!r}; use {', '.join(PRESETS)}")
    rules = data.get("spans", [])
    if not isinstance(rules, list):
        raise ConventionsError("spans: expected a list of tables (role, name, ...)")
    spans = tuple(_rule(entry, index) for index, entry in enumerate(rules))
    fields = data.get("fields", {})
    if not isinstance(fields, Mapping):
        raise ConventionsError("fields: expected a table of field = attribute name(s)")
    mapped: dict[str, tuple[str, ...]] = {}
    for name, keys in fields.items():
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list) or not all(isinstance(key, str) and key for key in keys):
            raise ConventionsError(f"fields: {name} must be an attribute name or a list of them")
        mapped[str(name)] = tuple(keys)
    own = Conventions(spans, mapped, (source,))
    result = Conventions()
    for name in presets:
        result = result.combined(PRESETS[name])
    return own.combined(result)


def _rule(entry: Any, index: int) -> SpanRule:
    if not isinstance(entry, Mapping):
        raise ConventionsError(f"spans[{index}]: expected a table (role, name, ...)")
    unknown = sorted(set(entry) - set(_RULE_KEYS))
    if unknown:
        raise ConventionsError(
            f"spans[{index}]: unknown key(s) {', '.join(map(repr, unknown))}; use "
            f"{', '.join(_RULE_KEYS)}"
        )
    values = entry.get("values", ())
    if isinstance(values, str):
        values = (values,)
    if not isinstance(values, (list, tuple)):
        raise ConventionsError(f"spans[{index}]: values must be a list")
    for key in ("name", "name_prefix", "attribute", "format", "role"):
        if key in entry and not isinstance(entry[key], str):
            raise ConventionsError(f"spans[{index}]: {key} must be text")
    root_only = entry.get("root_only", False)
    if not isinstance(root_only, bool):
        raise ConventionsError(f"spans[{index}]: root_only must be true or false")
    try:
        return SpanRule(
            role=entry.get("role", ""),
            name=entry.get("name"),
            name_prefix=entry.get("name_prefix"),
            attribute=entry.get("attribute"),
            values=tuple(values),
            root_only=root_only,
            format=entry.get("format"),
        )
    except ConventionsError as exc:
        raise ConventionsError(f"spans[{index}]: {exc}") from None


def translated(records: Iterable[SpanRecord], conventions: Conventions) -> Iterable[SpanRecord]:
    """``records``, each translated (the offline readers' path)."""
    if not conventions:
        yield from records
        return
    translate = conventions.translate
    for record in records:
        yield from translate(record)

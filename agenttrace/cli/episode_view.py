"""``agenttrace inspect --episode/--worst/--status``: chosen episodes, step by step.

:func:`select` picks episodes from a stream of trajectories in bounded memory: episodes chosen
by id or status come out as they are read; ``--worst N`` keeps a heap of N. :func:`episode_lines`
turns one trajectory into printable lines: the header (id, status, task, return, length,
times, what is lossy or missing), then each step (action, reward, termination, observation,
the messages of its model calls, its tool calls), then the episode's error with its stack.
Values are shown compactly: long text is cut with a count of what was cut, big arrays become
their shape and dtype, long containers their first items.
"""

from __future__ import annotations

import datetime as _dt
import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.text import Text

from agenttrace.cli.summary import printable, usable_return
from agenttrace.trajectory.model import LLMCall, Step, ToolCall, Trajectory

#: Characters of a message, observation or other value shown before it is cut (``--max-chars``).
MAX_CHARS = 200
#: Characters of a tool call's arguments shown next to its name.
ARGUMENT_CHARS = 60
#: Items of a list or dict shown before "+N more".
MAX_ITEMS = 10
#: Arrays with more elements than this are shown as their shape and dtype.
ARRAY_ELEMENTS = 16
#: Episode ids kept to suggest when a requested id is not found.
SUGGESTED_IDS = 5
#: Levels of nested containers shown; deeper ones are shown as their brackets and "…".
MAX_LEVELS = 8

_STATUS_STYLES = {"completed": "green", "errored": "bold red", "aborted": "red"}


# --- choosing episodes ------------------------------------------------------------------------


@dataclass
class Selection:
    """What :func:`select` saw while choosing (filled in as the stream is read)."""

    #: Trajectories read.
    read: int = 0
    #: Requested ids (``--episode``) present in the files, whatever the other filters said.
    found: set[str] = field(default_factory=set)
    #: The first few ids read, and per requested id a few ids that contain it (suggestions).
    first_ids: list[str] = field(default_factory=list)
    similar: dict[str, list[str]] = field(default_factory=dict)


def select(
    trajectories: Iterable[Trajectory],
    keep: Callable[[Trajectory], bool],
    *,
    wanted_ids: set[str],
    worst: int | None,
    seen: Selection,
) -> Iterator[Trajectory]:
    """The trajectories ``keep`` accepts, in file order as they are read; with ``worst`` the N
    with the lowest return (lowest first; NaN or missing returns count as highest), chosen
    with a heap of N, so memory never holds more than N trajectories."""
    chosen = (t for t in _noted(trajectories, wanted_ids, seen) if keep(t))
    if worst is None:
        return chosen
    return iter(heapq.nsmallest(worst, chosen, key=_return_rank))


def _noted(
    trajectories: Iterable[Trajectory], wanted_ids: set[str], seen: Selection
) -> Iterator[Trajectory]:
    for trajectory in trajectories:
        seen.read += 1
        episode_id = trajectory.episode_id
        if len(seen.first_ids) < SUGGESTED_IDS:
            seen.first_ids.append(episode_id)
        if episode_id in wanted_ids:
            seen.found.add(episode_id)
        for wanted in wanted_ids:
            similar = seen.similar.setdefault(wanted, [])
            if wanted in episode_id and episode_id != wanted and len(similar) < SUGGESTED_IDS:
                similar.append(episode_id)
        yield trajectory


def _return_rank(trajectory: Trajectory) -> tuple[bool, float]:
    value = usable_return(trajectory.return_)
    return (value is None, 0.0 if value is None else value)


# --- one episode as lines ---------------------------------------------------------------------


def episode_lines(trajectory: Trajectory, max_chars: int = MAX_CHARS) -> Iterator[Text]:
    """The episode step by step, as lines to print (``max_chars`` 0: nothing is cut).

    Text read from the file is shown as it is, except a lone surrogate (valid in JSON, not in
    UTF-8), which is shown as its escape ``\\udcff``.
    """
    for line in _episode_lines(trajectory, max_chars):
        yield _printable_line(line)


def _printable_line(line: Text) -> Text:
    """``line`` with lone surrogates escaped, its styles kept."""
    plain = line.plain
    if plain.isascii() or printable(plain) == plain:
        return line
    cuts = sorted({offset for span in line.spans for offset in (span.start, span.end)})
    fixed = Text(style=line.style, end=line.end)
    for piece in line.divide(cuts):  # each span covers a piece whole, or not at all
        text = Text(printable(piece.plain))
        for span in piece.spans:
            text.stylize(span.style)
        fixed.append_text(text)
    return fixed


def _episode_lines(trajectory: Trajectory, max_chars: int) -> Iterator[Text]:
    t = trajectory
    yield Text.assemble(
        ("episode ", "bold"),
        (t.episode_id, "bold"),
        "  ",
        (t.status, _STATUS_STYLES.get(t.status, "yellow")),
    )
    steps = len(t.steps)
    recorded = "" if steps == t.length else f" ({steps} step{'s' if steps != 1 else ''} recorded)"
    yield _field("task", _or_dash(t.task_id))
    yield _field("return", f"{_number(t.return_)}   length {t.length}{recorded}")
    if t.start_time is not None or t.end_time is not None:
        yield _field("time", _span_of_time(t.start_time, t.end_time))
    if t.trace_id:
        yield _field("trace", t.trace_id)
    if t.attributes:
        yield _field("attributes", short(t.attributes, max_chars))
    if t.missing_steps:
        yield _field("missing", "steps " + ", ".join(str(i) for i in t.missing_steps), "yellow")
    for path, reason in t.lossy.items():
        yield _field("lossy", f"{path}: {reason}", "yellow")
    for step in t.steps:
        yield from _step_lines(step, max_chars)
    if t.final_observation is not None:
        yield _field("final observation", short(t.final_observation, max_chars), indent=0)
    if t.error is not None:
        kind = t.error.type or "error"
        message = t.error.message or ""
        yield Text.assemble(
            ("error ", "bold red"), (kind, "red"), f": {message}" if message else ""
        )
        for line in (t.error.stack or "").rstrip().splitlines():
            yield Text("  " + line)


def _step_lines(step: Step, max_chars: int) -> Iterator[Text]:
    header = Text.assemble(
        (f"step {step.index}", "bold"),
        f"  action {'-' if step.action is None else short(step.action, max_chars)}",
        f"  reward {_number(step.reward)}",
    )
    for flag, on in (("terminated", step.terminated), ("truncated", step.truncated)):
        if on:
            header.append(f"  {flag}", "yellow")
    if step.start_time is not None and step.end_time is not None:
        header.append(f"  ({_duration(step.end_time - step.start_time)})", "dim")
    if step.error:  # the step failed (its partial data is shown)
        header.append(f"  error: {step.error}", "red")
    yield header
    yield _field("observation", short(step.observation, max_chars), indent=4)
    if step.info:
        yield _field("info", short(step.info, max_chars), indent=4)
    for call in step.llm_calls:
        yield from _llm_lines(call, max_chars)
    for tool in step.tool_calls:
        yield _tool_line(tool, max_chars)


def _llm_lines(call: LLMCall, max_chars: int) -> Iterator[Text]:
    about = []
    if call.model and call.model not in call.name:
        about.append(call.model)
    if call.provider:
        about.append(call.provider)
    if call.input_tokens is not None or call.output_tokens is not None:
        about.append(
            f"{_or_dash(call.input_tokens)} in / {_or_dash(call.output_tokens)} out tokens"
        )
    if call.finish_reasons:
        about.append("finish " + ",".join(str(r) for r in call.finish_reasons))
    if call.start_time is not None and call.end_time is not None:
        about.append(_duration(call.end_time - call.start_time))
    line = Text.assemble("    ", ("llm ", "bold"), call.name)
    if about:
        line.append("  (" + ", ".join(about) + ")", "dim")
    if call.error:
        line.append(f"  error: {call.error}", "red")
    yield line
    for messages in (call.input_messages, call.output_messages):
        for message in _as_list(messages):
            yield from _message_lines(message, max_chars)


def _message_lines(message: Any, max_chars: int) -> Iterator[Text]:
    """``role: content`` (cut to max_chars), and the tool calls the message asks for by name."""
    if not isinstance(message, dict):
        yield Text("      " + short(message, max_chars))
        return
    role = str(message.get("role") or "?")
    label = role
    if message.get("tool_call_id"):
        label += f" ({message['tool_call_id']})"
    elif message.get("name"):
        label += f" ({message['name']})"
    content = _content_text(message.get("content"), max_chars)
    calls = message.get("tool_calls") or []
    if content or not calls:
        yield Text.assemble("      ", (label + ":", "cyan"), " ", _one_line(content, max_chars))
    if calls:
        names = ", ".join(_tool_request(call) for call in _as_list(calls))
        yield Text.assemble("      ", (label + ":", "cyan"), " ", ("calls ", "italic"), names)


def _content_text(content: Any, max_chars: int) -> str:
    """Message content as text: plain text, the text of content parts, other parts by type."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, dict):
                pieces.append(f"[{part.get('type', 'part')}]")
            else:
                pieces.append(short(part, max_chars))
        return " ".join(pieces)
    return short(content, max_chars)


def _tool_request(call: Any) -> str:
    """``name(arguments)`` of an OpenAI-style tool call, the arguments cut short."""
    if not isinstance(call, dict):
        return short(call, ARGUMENT_CHARS)
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    name = str(function.get("name") or "?")
    arguments = function.get("arguments")
    if arguments is None or (isinstance(arguments, (str, dict)) and not arguments):
        return f"{name}()"
    text = arguments if isinstance(arguments, str) else short(arguments, ARGUMENT_CHARS)
    return f"{name}({_one_line(text, ARGUMENT_CHARS)})"


def _tool_line(tool: ToolCall, max_chars: int) -> Text:
    line = Text.assemble(
        "    ", ("tool ", "bold"), tool.name, f"({short(tool.arguments, ARGUMENT_CHARS)})"
    )
    if tool.result is not None:
        line.append(f" -> {short(tool.result, max_chars)}")
    if tool.error:
        line.append(f"  error: {tool.error}", "red")
    return line


# --- values -----------------------------------------------------------------------------------


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` with an ellipsis and the count of characters cut."""
    if not max_chars or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}…{_cut(len(text) - max_chars)}"


def _cut(count: int) -> str:
    return f" (+{count:,} char{'s' if count != 1 else ''})"


def _one_line(text: str, max_chars: int) -> str:
    """Cut first (so the count is of the original), then show line breaks as ↵."""
    return clip(text, max_chars).replace("\r\n", "\n").replace("\n", "↵")


def short(value: Any, max_chars: int = MAX_CHARS) -> str:
    """A compact one-line rendering of a decoded value, about ``max_chars`` long at most.

    A string longer than that is cut with the count of characters cut; other values end in
    an ellipsis where they are cut (containers also say how many items were left out), and
    containers nested more than :data:`MAX_LEVELS` deep show their inner levels as "…".
    """
    if isinstance(value, str) and max_chars and len(value) > max_chars:
        return f"{value[:max_chars]!r}…{_cut(len(value) - max_chars)}"
    try:
        text = _render(value, max_chars or 10**9)
    except Exception as exc:  # a decoded object whose repr fails: say so, show the rest
        text = f"<{type(value).__name__}: cannot show it: {type(exc).__name__}>"
    return text if not max_chars or len(text) <= max_chars else text[:max_chars] + "…"


def _render(value: Any, budget: int, level: int = 0) -> str:
    """Python-like text of ``value``; containers stop adding items once over ``budget``."""
    if isinstance(value, str):
        return repr(value[: budget + 1])  # enough to be cut by the caller, never the whole
    if isinstance(value, float):
        text = repr(value)
        return text if len(text) <= 12 else f"{value:.6g}"
    if value is None or isinstance(value, (bool, int)):
        if value is not None and value.bit_length() > 10_000:  # str() refuses 4,300+ digits
            return f"<integer of about {int(value.bit_length() * 0.30103):,} digits>"
        return repr(value)
    if isinstance(value, np.ndarray):
        if value.size > ARRAY_ELEMENTS or value.ndim > 2 or value.dtype.kind not in "biufcUS":
            return f"ndarray(shape={value.shape}, dtype={value.dtype})"
        return f"array({_render(value.tolist(), budget, level)}, dtype={value.dtype})"
    if isinstance(value, np.generic):
        return _render(value.item(), budget, level)
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = len(bytes(value)) if isinstance(value, memoryview) else len(value)
        return repr(bytes(value)) if size <= 32 else f"<{size:,} bytes>"
    deeper = level + 1
    if isinstance(value, dict):
        if level >= MAX_LEVELS and value:
            return "{…}"
        items = (
            f"{_render(k, budget, deeper)}: {_render(v, budget, deeper)}" for k, v in value.items()
        )
        return _joined("{", items, len(value), "}", budget)
    if isinstance(value, (list, tuple)):
        if level >= MAX_LEVELS and value:
            return "[…]" if isinstance(value, list) else "(…)"
        items = (_render(item, budget, deeper) for item in value)
        if isinstance(value, list):
            return _joined("[", items, len(value), "]", budget)
        return _joined("(", items, len(value), ",)" if len(value) == 1 else ")", budget)
    if isinstance(value, (set, frozenset)) and value:
        if level >= MAX_LEVELS:
            return "{…}"
        return _joined(
            "{", (_render(item, budget, deeper) for item in value), len(value), "}", budget
        )
    return repr(value)[: budget + 1]


def _joined(opening: str, items: Iterator[str], count: int, closing: str, budget: int) -> str:
    shown: list[str] = []
    used = 0
    for item in items:
        if len(shown) == MAX_ITEMS or used > budget:
            break
        shown.append(item)
        used += len(item) + 2
    more = count - len(shown)
    return opening + ", ".join(shown) + (f", … +{more} more" if more else "") + closing


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return _render(value, 40)


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _field(label: str, value: str, style: str = "", *, indent: int = 2) -> Text:
    return Text.assemble(" " * indent, (f"{label:<11} ", "dim"), (value, style))


def _when(ns: int, date: bool = True) -> str:
    try:
        moment = _dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):  # beyond what the platform's clock can show
        return f"{ns} ns"
    shown = f"{moment:%Y-%m-%d %H:%M:%S}" if date else f"{moment:%H:%M:%S}"
    return f"{shown}.{ns % 1_000_000_000 // 1_000_000:03d}" + (" UTC" if date else "")


def _duration(ns: int) -> str:
    if abs(ns) < 1_000_000:
        return f"{ns / 1e3:.0f} µs"
    if abs(ns) < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.3f} s"


def _span_of_time(start: int | None, end: int | None) -> str:
    """``start to end (duration)``, UTC; the end without its date when it is the same day."""
    if start is None or end is None:
        return " to ".join("-" if ns is None else _when(ns) for ns in (start, end))
    same_day = start // 86_400_000_000_000 == end // 86_400_000_000_000
    return f"{_when(start)} to {_when(end, date=not same_day)} ({_duration(end - start)})"

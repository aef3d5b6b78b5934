"""The compatibility matrix (docs/compatibility.md), declared by the tests that check it.

A test module that compares agenttrace with a library's own record defines
``COMPATIBILITY``, a list of :class:`Entry` rows, and checks every field an entry calls equal
(its tests are parametrized over :meth:`Entry.equal_fields`, so a row cannot claim more than
the tests check). The page is rendered from those rows; tests/test_compatibility_page.py fails
when docs/compatibility.md differs from the rendering. ``python3 tests/compatibility.py``
rewrites the page.

Framework rows compare with :func:`framework_fields`: the framework's own result object,
normalised by the test into :class:`FrameworkTruth`, against the trajectory.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
PAGE = TESTS.parent / "docs" / "compatibility.md"
EQUAL = "equal"

#: The fields compared per agent framework, in the page's column order.
FRAMEWORK_FIELDS = (
    "messages",
    "tool definitions",
    "tool call ids",
    "tool call names",
    "tool call arguments",
    "tool call results",
    "final answer",
    "status",
)
#: The fields compared per Gymnasium space type (Minari export and step tables).
SPACE_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "infos",
    "step tables",
)
SECTIONS = {
    "Agent frameworks": FRAMEWORK_FIELDS,
    "Gymnasium spaces": SPACE_FIELDS,
}


@dataclass(frozen=True)
class Entry:
    """One row of the page: a library (or space type), how it is captured, and per field
    ``"equal"`` or a short reason it is not."""

    section: str
    name: str
    route: str
    fields: dict[str, str]
    module: str = ""

    def __post_init__(self) -> None:
        expected = SECTIONS[self.section]
        if set(self.fields) != set(expected):
            raise ValueError(f"{self.name}: fields must be exactly {expected}")

    def equal_fields(self) -> list[str]:
        return [name for name in SECTIONS[self.section] if self.fields[name] == EQUAL]


def equal_on(section: str, name: str, route: str, **not_equal: str) -> Entry:
    """An entry equal on every field of its section but those given (``field_name=reason``,
    with spaces in field names written as underscores)."""
    fields = {key: EQUAL for key in SECTIONS[section]}
    for key, reason in not_equal.items():
        fields[key.replace("_", " ")] = reason
    return Entry(section, name, route, fields)


# --- agent frameworks ------------------------------------------------------------------------


@dataclass
class FrameworkTruth:
    """What a framework's own result object says happened, normalised.

    ``messages`` are OpenAI-style chat messages (the conversation the last model call saw,
    followed by its answer); ``tools`` the tools offered as ``{"name", "description",
    "parameters"}``; ``tool_calls`` ``{"id", "name", "arguments", "result"}`` with arguments
    decoded; ``final_answer`` the run's output text; ``status`` what the run ended as.
    """

    messages: list[dict]
    tools: list[dict]
    tool_calls: list[dict]
    final_answer: Any
    status: str = "completed"
    extra: dict = field(default_factory=dict)


def framework_fields(trajectory: Any, truth: FrameworkTruth) -> dict[str, tuple[Any, Any]]:
    """Per framework field, ``(ours, theirs)`` normalised alike; equal when the two match."""
    from agenttrace import semconv as sc
    from agenttrace.trajectory.chat import chat_rows

    rows = chat_rows(trajectory)
    calls = [call for step in trajectory.steps for call in step.tool_calls]
    last_call = trajectory.steps[-1].llm_calls[-1] if trajectory.steps[-1].llm_calls else None
    offered = last_call.attributes.get(sc.GEN_AI_TOOL_DEFINITIONS) if last_call else None
    return {
        "messages": (
            normal_messages(rows[-1]["messages"] if rows else []),
            normal_messages(truth.messages),
        ),
        "tool definitions": (normal_tools(offered), normal_tools(truth.tools)),
        "tool call ids": ([c.call_id for c in calls], [c["id"] for c in truth.tool_calls]),
        "tool call names": ([c.name for c in calls], [c["name"] for c in truth.tool_calls]),
        "tool call arguments": (
            [decoded(c.arguments) for c in calls],
            [decoded(c["arguments"]) for c in truth.tool_calls],
        ),
        "tool call results": (
            [as_text(c.result) for c in calls],
            [as_text(c["result"]) for c in truth.tool_calls],
        ),
        "final answer": (as_text(trajectory.steps[-1].action), as_text(truth.final_answer)),
        "status": (trajectory.status, truth.status),
    }


def decoded(value: Any) -> Any:
    """JSON text decoded, anything else as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def as_text(value: Any) -> Any:
    """Text as it is; other values as their compact JSON (a tool result of 42 equals "42")."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def normal_messages(messages: Any) -> list[dict]:
    """Role, text content, tool calls (id, name, decoded arguments) and tool_call_id only."""
    out = []
    for message in messages or []:
        content = message.get("content")
        if isinstance(content, list):  # text parts
            content = "".join(
                part.get("text", "") if isinstance(part, dict) else str(part) for part in content
            )
        item: dict[str, Any] = {"role": message.get("role"), "content": content or None}
        calls = message.get("tool_calls") or []
        if calls:
            item["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "name": (call.get("function") or call).get("name"),
                    "arguments": decoded((call.get("function") or call).get("arguments")),
                }
                for call in calls
            ]
        if message.get("tool_call_id") is not None:
            item["tool_call_id"] = message["tool_call_id"]
        out.append(item)
    return out


def normal_tools(tools: Any) -> list[dict]:
    """``{"type": "function", "function": {...}}`` and flat definitions alike, by name."""
    tools = decoded(tools)
    out = []
    for tool in tools or []:
        spec = tool.get("function", tool) if isinstance(tool, dict) else {}
        out.append(
            {
                "name": spec.get("name"),
                "description": spec.get("description") or None,
                "parameters": decoded(spec.get("parameters")),
            }
        )
    return sorted(out, key=lambda tool: str(tool["name"]))


# --- the page --------------------------------------------------------------------------------


def declaring_modules() -> list[str]:
    """Test modules that define COMPATIBILITY (found by text, imported by name)."""
    return sorted(
        path.stem
        for path in TESTS.glob("test_*.py")
        if "\nCOMPATIBILITY" in path.read_text(encoding="utf-8")
    )


def entries() -> list[Entry]:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    found = []
    for name in declaring_modules():
        module = importlib.import_module(name)
        for entry in module.COMPATIBILITY:
            found.append(Entry(entry.section, entry.name, entry.route, entry.fields, name))
    return found


def render() -> str:
    lines = [
        "# Compatibility",
        "",
        "What agenttrace was tested against, how each library is captured, and which fields of",
        "the trajectories equal the library's own record. Generated from the tests that check",
        "it (`tests/compatibility.py`; `python3 tests/compatibility.py` rewrites this page, and",
        "`tests/test_compatibility_page.py` fails when it drifts). Each row names the test file",
        "that compares it, field by field, with the library's own result object.",
        "",
    ]
    found = entries()
    for section, columns in SECTIONS.items():
        rows = [entry for entry in found if entry.section == section]
        if not rows:
            continue
        lines += [f"## {section}", ""]
        lines.append("| | route | " + " | ".join(columns) + " | tested by |")
        lines.append("|---" * (len(columns) + 3) + "|")
        for entry in sorted(rows, key=lambda e: e.name.lower()):
            cells = ["✓" if entry.fields[c] == EQUAL else entry.fields[c] for c in columns]
            lines.append(
                f"| {entry.name} | {entry.route} | "
                + " | ".join(cells)
                + f" | `tests/{entry.module}.py` |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")

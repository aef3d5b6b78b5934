"""The agent: chats with a tool-calling model, one assistant turn per timestep.

``ScriptedLLM`` stands in for an OpenAI-compatible chat model: it takes the same request
(messages and tool schemas) and answers with the same response shape (``choices[0].message``
with ``tool_calls``, ``finish_reason``, ``usage``), but its decisions are scripted: it plans
the operations of the expression in the question and calls one tool per operation, reading
earlier results from the tool messages, then submits. Deterministic, no network.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from opentelemetry import trace

SYSTEM_PROMPT = "You are a careful calculator. Never compute in your head: use the tools."

_QUESTION = re.compile(r"^Compute (?P<expression>.+?)\. Use")
_TOOL_OF_OPERATOR = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply"}

# An operand is ("literal", value) or ("result", index of an earlier operation).
Operand = tuple[str, int]


class ScriptedLLM:
    def __init__(
        self, model: str = "scripted-calculator-1", tracer: trace.Tracer | None = None
    ) -> None:
        self.model = model
        self.calls = 0
        self.tracer = tracer or trace.NoOpTracer()

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat completion, as an OpenAI-compatible server would return it.

        ``tools`` are the schemas on offer; the script only ever calls offered tools. The call
        is traced as an OpenTelemetry-instrumented LLM client traces it (GenAI conventions).
        """
        with self.tracer.start_as_current_span(f"chat {self.model}") as span:
            response = self._answer(messages, tools)
            if span.is_recording():
                message = response["choices"][0]["message"]
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.request.model": self.model,
                        "gen_ai.response.model": response["model"],
                        "gen_ai.response.id": response["id"],
                        "gen_ai.input.messages": json.dumps(messages),
                        "gen_ai.output.messages": json.dumps([message]),
                        "gen_ai.tool.definitions": json.dumps(tools),
                        "gen_ai.response.finish_reasons": ["tool_calls"],
                        "gen_ai.usage.input_tokens": response["usage"]["prompt_tokens"],
                        "gen_ai.usage.output_tokens": response["usage"]["completion_tokens"],
                    }
                )
            return response

    def _answer(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.calls += 1
        question = next(m["content"] for m in messages if m["role"] == "user")
        plan = _plan(_QUESTION.match(question)["expression"])
        results = [int(m["content"]) for m in messages if m["role"] == "tool"]
        if len(results) < len(plan):
            name, left, right = plan[len(results)]
            arguments = {"a": _operand(left, results), "b": _operand(right, results)}
        else:
            name, arguments = "submit", {"answer": results[-1]}
        call = {
            "id": f"call_{len(results)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {
            "id": f"chatcmpl-{self.calls}",
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": _tokens(messages), "completion_tokens": _tokens([message])},
        }


def _plan(expression: str) -> list[tuple[str, Operand, Operand]]:
    """The expression's operations in evaluation order (innermost first)."""
    plan: list[tuple[str, Operand, Operand]] = []

    def visit(node: ast.AST) -> Operand:
        if isinstance(node, ast.BinOp):
            left, right = visit(node.left), visit(node.right)
            plan.append((_TOOL_OF_OPERATOR[type(node.op)], left, right))
            return ("result", len(plan) - 1)
        return ("literal", int(node.value))  # type: ignore[attr-defined]

    visit(ast.parse(expression, mode="eval").body)
    return plan


def _operand(operand: Operand, results: list[int]) -> int:
    kind, value = operand
    return results[value] if kind == "result" else value


def _tokens(messages: list[dict[str, Any]]) -> int:
    """A stand-in token count: words of the JSON text."""
    return len(json.dumps(messages).split())


class ToolAgent:
    """Keeps the conversation; each ``act`` is one assistant turn with the tools on offer."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.chats: list[dict[str, Any]] = []

    def init_after_reset(self, observation: str) -> None:
        self.chats = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": observation},
        ]

    def act(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        response = self.llm.chat(list(self.chats), tools)
        message = response["choices"][0]["message"]
        self.chats.append(message)
        return message

    def observe(self, tool_message: dict[str, Any]) -> None:
        self.chats.append(tool_message)

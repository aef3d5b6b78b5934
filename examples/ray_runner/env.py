"""The environment: compute an arithmetic expression with calculator tools, then submit it.

Each step executes one tool call and answers with a ``tool`` chat message. Operations cost a
little (-0.05); the episode ends with the ``submit`` call, worth 1 when the answer is right.
``submit`` is offered only once something has been computed, so the tools on offer change
from step to step. A task whose expression does not parse fails at ``reset``.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OPERATION_COST = -0.05
CORRECT_ANSWER_REWARD = 1.0

#: Tool name -> the Python operation it performs, and the AST operator it stands for.
OPERATIONS: dict[str, tuple[Callable[[int, int], int], type[ast.operator]]] = {
    "add": (operator.add, ast.Add),
    "subtract": (operator.sub, ast.Sub),
    "multiply": (operator.mul, ast.Mult),
}


def _tool_schema(name: str, description: str, parameters: dict[str, str]) -> dict[str, Any]:
    """An OpenAI-style function tool schema with integer parameters."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    key: {"type": "integer", "description": text}
                    for key, text in parameters.items()
                },
                "required": list(parameters),
            },
        },
    }


OPERATION_SCHEMAS = [
    _tool_schema("add", "a + b", {"a": "left operand", "b": "right operand"}),
    _tool_schema("subtract", "a - b", {"a": "left operand", "b": "right operand"}),
    _tool_schema("multiply", "a * b", {"a": "left operand", "b": "right operand"}),
]
SUBMIT_SCHEMA = _tool_schema("submit", "Submit the final answer", {"answer": "the value"})


class EnvResetError(RuntimeError):
    """The task cannot be set up."""


@dataclass
class StepOutput:
    """What one tool call gave: the tool's chat message, the reward, and whether it ended."""

    observation: dict[str, Any]
    reward: float
    done: bool


class ArithmeticEnv:
    def __init__(self) -> None:
        self.expression: str | None = None
        self.answer: int | None = None
        self.computed: list[int] = []

    def reset(self, expression: str) -> str:
        """Start a task; the observation is the question for the agent."""
        self.answer = evaluate(expression)
        self.expression = expression
        self.computed = []
        return f"Compute {expression}. Use one tool call per operation, then submit the result."

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return OPERATION_SCHEMAS + ([SUBMIT_SCHEMA] if self.computed else [])

    def step(self, tool_call: dict[str, Any]) -> StepOutput:
        name = tool_call["function"]["name"]
        arguments = json.loads(tool_call["function"]["arguments"])
        offered = {schema["function"]["name"] for schema in self.get_tool_schemas()}
        if name not in offered:
            answer = _tool_message(tool_call, f"no tool {name!r} now")
            return StepOutput(answer, OPERATION_COST, False)
        if name == "submit":
            correct = arguments["answer"] == self.answer
            answer = _tool_message(tool_call, "correct" if correct else "wrong")
            return StepOutput(answer, CORRECT_ANSWER_REWARD if correct else 0.0, True)
        value = OPERATIONS[name][0](arguments["a"], arguments["b"])
        self.computed.append(value)
        return StepOutput(_tool_message(tool_call, str(value)), OPERATION_COST, False)


def _tool_message(tool_call: dict[str, Any], content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call["id"], "content": content}


def evaluate(expression: str) -> int:
    """The value of an expression of integers, +, - and *; EnvResetError for anything else."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise EnvResetError(f"cannot parse expression {expression!r}: {exc.msg}") from None
    return _value(tree.body, expression)


def _value(node: ast.AST, expression: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp):
        for function, op_type in OPERATIONS.values():
            if isinstance(node.op, op_type):
                return function(_value(node.left, expression), _value(node.right, expression))
    raise EnvResetError(f"expression {expression!r}: only integers, +, - and * are supported")

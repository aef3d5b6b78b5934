"""The environment: compute an arithmetic expression with calculator tools, then submit it.

Each step executes one tool call and answers with a ``tool`` chat message. An operation
costs the task's ``step_cost`` when it has one, else it is not rated (reward ``None``); the
episode ends with the ``submit`` call, worth 1 when the answer is right. ``submit`` is offered
only once something has been computed, so the tools on offer change from step to step. A task
whose expression does not parse fails at ``reset``; one with ``fail_at_step`` set loses its
tool server at that step (``step`` raises). ``get_episode_id()`` names the episode in play.
"""

from __future__ import annotations

import ast
import itertools
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CORRECT_ANSWER_REWARD = 1.0
_episode_numbers = itertools.count(1)

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


class ToolServerError(RuntimeError):
    """The tool server went away in the middle of an episode."""


@dataclass
class StepOutput:
    """What one tool call gave: the tool's chat message, the reward (None: not rated), and
    whether it ended."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


class ArithmeticEnv:
    def __init__(self) -> None:
        self.expression: str | None = None
        self.answer: int | None = None
        self.computed: list[int] = []
        self.episode_id: str | None = None
        self.step_cost: float | None = None
        self.fail_at_step: int | None = None
        self.steps = 0

    def reset(
        self,
        expression: str,
        seed: int | None = None,
        task_unique_id: str | None = None,
        step_cost: float | None = None,
        fail_at_step: int | None = None,
    ) -> str:
        """Start a task; the observation is the question for the agent."""
        self.episode_id = f"{task_unique_id or 'task'}-{seed or 0}-{next(_episode_numbers)}"
        self.answer = evaluate(expression)
        self.expression = expression
        self.computed = []
        self.step_cost = step_cost
        self.fail_at_step = fail_at_step
        self.steps = 0
        return f"Compute {expression}. Use one tool call per operation, then submit the result."

    def get_episode_id(self) -> str | None:
        """The id of the episode the last reset started (also when that reset failed)."""
        return self.episode_id

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return OPERATION_SCHEMAS + ([SUBMIT_SCHEMA] if self.computed else [])

    def step(self, tool_call: dict[str, Any]) -> StepOutput:
        self.steps += 1
        if self.fail_at_step is not None and self.steps > self.fail_at_step:
            raise ToolServerError(f"tool server unavailable at step {self.fail_at_step}")
        name = tool_call["function"]["name"]
        arguments = json.loads(tool_call["function"]["arguments"])
        offered = {schema["function"]["name"] for schema in self.get_tool_schemas()}
        if name not in offered:
            answer = _tool_message(tool_call, f"no tool {name!r} now")
            return StepOutput(answer, self.step_cost, False)
        if name == "submit":
            correct = arguments["answer"] == self.answer
            answer = _tool_message(tool_call, "correct" if correct else "wrong")
            return StepOutput(answer, CORRECT_ANSWER_REWARD if correct else 0.0, True)
        value = OPERATIONS[name][0](arguments["a"], arguments["b"])
        self.computed.append(value)
        return StepOutput(_tool_message(tool_call, str(value)), self.step_cost, False)


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

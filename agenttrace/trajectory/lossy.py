"""Which fields of a rebuilt trajectory the trace storage cut or lost (``Trajectory.lossy``).

Two sources, both cheap:

* what readers and the content restorer put in ``SpanRecord.lossy`` (times kept to the
  microsecond by Jaeger v1 or Phoenix, a blob that could not be found, content the export
  policy truncated or removed), mapped from the span's attribute to the trajectory's field;
* content of agenttrace's RL spans that is no longer JSON: agenttrace always writes JSON, so
  text that does not parse was cut by the storage (Tempo's attribute length limit, say). The
  assembler keeps such text as a plain ``str`` rather than lazily decoded JSON, which is what
  is checked here.

Nothing here changes a trajectory's content; it only says where not to trust it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.codec import RawJSON
from agenttrace.trajectory.model import Step, Trajectory
from agenttrace.trajectory.records import LOSSY_SPAN, LOSSY_TIMES, SpanRecord

NOT_JSON = "not valid JSON any more: cut by the trace storage (attribute length limit?)"
_STEP_ROLES = sc.STEP_ROLES
_STEP_FIELDS = {
    sc.OBSERVATION: "observation",
    sc.ACTION: "action",
    sc.INFO: "info",
    sc.REWARD: "reward",
    sc.TERMINATED: "terminated",
    sc.TRUNCATED: "truncated",
    sc.DISCOUNT: "discount",
}
_CONTENT_FIELDS = ("observation", "action", "info")


def lossy_fields(
    records: Sequence[SpanRecord],
    trajectory: Trajectory,
    step_of: Callable[[SpanRecord], int | None],
) -> dict[str, str]:
    """Field path -> reason, for ``trajectory`` rebuilt from ``records``.

    ``step_of`` is the assembler's rule for the step a GenAI span belongs to.
    """
    found: dict[str, str] = {}
    marked = [record for record in records if record.lossy]
    if marked:
        indices = [step.index for step in trajectory.steps]
        for record in marked:
            for key, reason in record.lossy.items():
                path = _field_path(record, key, indices, step_of)
                if path is not None:
                    found.setdefault(path, reason)
    for step in trajectory.steps:
        for name in _CONTENT_FIELDS:
            if _is_cut_text(step, name):
                found.setdefault(f"steps[{step.index}].{name}", NOT_JSON)
    for name in ("final_observation", "reset_info"):
        if _is_cut_text(trajectory, name):
            found.setdefault(name, NOT_JSON)
    return found


def _is_cut_text(holder: Step | Trajectory, name: str) -> bool:
    """A content field held as plain text: its attribute was text that is not JSON."""
    value = holder.__dict__["_" + name]
    return type(value) is str and type(value) is not RawJSON


def _field_path(
    record: SpanRecord,
    key: str,
    indices: Sequence[int],
    step_of: Callable[[SpanRecord], int | None],
) -> str | None:
    """Where attribute ``key`` of ``record`` went in the trajectory (None: nowhere)."""
    if key == LOSSY_TIMES:
        return "times"
    if key.startswith("@") and key != LOSSY_SPAN:  # context no trajectory field holds
        return None
    name = record.name
    if name == sc.EPISODE:
        return "episode" if key == LOSSY_SPAN else f"attributes.{key}"
    if name == sc.ENV_RESET:
        if key == sc.INFO:
            return "reset_info"
        if key == sc.OBSERVATION:
            return f"steps[{indices[0]}].observation" if indices else "final_observation"
        return "reset_info" if key == LOSSY_SPAN else None
    if name in _STEP_ROLES:
        index = record.attributes.get(sc.TIMESTEP_INDEX)
        if key == LOSSY_SPAN:
            return f"steps[{index}]"
        if key == sc.OBSERVATION and name == sc.ENV_STEP:  # the observation it returned
            later = [i for i in indices if isinstance(index, int) and i > index]
            return f"steps[{later[0]}].observation" if later else "final_observation"
        field = _STEP_FIELDS.get(key)
        return None if field is None else f"steps[{index}].{field}"
    kind = genai.call_kind(record)
    if kind is None or not (key == LOSSY_SPAN or key.startswith("gen_ai.")):
        return None  # a span, or an attribute, that no trajectory field is made from
    index = step_of(record)
    where = "llm_calls" if kind == genai.MODEL_CALL else "tool_calls"
    return f"steps[{index}].{where}" if index is not None else where

"""The ``rl.*`` values of stored spans, checked where the reader still knows file and line.

A span whose reward is ``"lots"``, whose return is 10^400 or whose status is a number must not
stop the rebuild, nor cost its episode: the bad value is left out of the record (read as
absent, which the assembler handles everywhere) and noted in the record's ``lossy``, which the
trajectory's ``lossy`` shows; the reader reports it as one located
:class:`~agenttrace.storage.errors.SpanDecodeError` naming the field. What each field must be
is :data:`agenttrace.trajectory.records.VALUE_KINDS` (the assembler applies the same rule to
records from elsewhere).

The check runs on every record read, so it looks only where the assembler reads: the step
spans' index, reward and discount, a model call's when it is an agent turn, the episode span's
return, length and status, and the per-environment lists of a vector step.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from agenttrace import semconv as sc
from agenttrace.storage.errors import SpanDecodeError, SpanFormatError
from agenttrace.trajectory.records import (
    INDEX_LIMIT,
    VALUE_KINDS,
    SpanRecord,
    left_out,
    value_problem,
)

_STEP, _EPISODE, _VECTOR = 1, 2, 3
_KIND_BY_NAME = {name: _STEP for name in sc.STEP_ROLES}
_KIND_BY_NAME[sc.EPISODE] = _EPISODE
_KIND_BY_NAME[sc.ENV_VECTOR_STEP] = _VECTOR
_INDEX, _REWARD, _DISCOUNT = sc.TIMESTEP_INDEX, sc.REWARD, sc.DISCOUNT
_RETURN, _LENGTH, _STATUS = sc.EPISODE_RETURN, sc.EPISODE_LENGTH, sc.EPISODE_STATUS
_TURN = sc.TIMESTEP_TURN
#: A vector step's lists whose entries become rl.* values of its env steps.
_VECTOR_ENTRIES = ((sc.VECTOR_REWARDS, sc.REWARD), (sc.VECTOR_STEP_INDICES, sc.TIMESTEP_INDEX))


def check_values(
    records: list[SpanRecord],
    report: Callable[[SpanFormatError], None],
    source: str | None = None,
    line: int | None = None,
) -> list[SpanRecord]:
    """``records`` (the same list) with every rl.* value the assembler cannot use left out;
    each one reported, at ``source``:``line`` when given. (Runs for every record read: the
    good values of the common types are let through with one type test each.)"""
    kind_by_name, limit = _KIND_BY_NAME, INDEX_LIMIT
    for position, record in enumerate(records):
        kind = kind_by_name.get(record.name)
        attributes = record.attributes
        if kind is None:
            if _TURN not in attributes:
                continue
            kind = _STEP
        get = attributes.get
        if kind == _STEP:
            index, reward, discount = get(_INDEX), get(_REWARD), get(_DISCOUNT)
            if (
                (index is None or (type(index) is int and 0 <= index < limit))
                and (reward is None or type(reward) is float)
                and (discount is None or type(discount) is float)
            ):
                continue
            bad = _problems(((_INDEX, index), (_REWARD, reward), (_DISCOUNT, discount)))
        elif kind == _EPISODE:
            value, length, status = get(_RETURN), get(_LENGTH), get(_STATUS)
            if (
                (value is None or type(value) is float)
                and (length is None or (type(length) is int and 0 <= length < limit))
                and (status is None or type(status) is str)
            ):
                continue
            bad = _problems(((_RETURN, value), (_LENGTH, length), (_STATUS, status)))
        else:
            bad = _vector_problems(attributes)
        if bad:
            records[position] = _left_out(record, bad, report, source, line)
    return records


def _problems(values: tuple[tuple[str, Any], ...]) -> dict[str, tuple[Any, str]] | None:
    """Key -> (None: left out, what is wrong) of the values the assembler cannot take."""
    bad = None
    for key, value in values:
        problem = value_problem(key, value)
        if problem is not None:
            if bad is None:
                bad = {}
            bad[key] = (None, problem)
    return bad


def _vector_problems(attributes: Any) -> dict[str, tuple[Any, str]] | None:
    """The bad entries of a vector step's lists: list key -> (the list fixed, what was wrong)."""
    bad = None
    for list_key, key in _VECTOR_ENTRIES:
        values = attributes.get(list_key)
        if not isinstance(values, (list, tuple)):
            continue
        fixed = None
        problems = []
        for i, value in enumerate(values):
            problem = value_problem(key, value)
            if problem is not None:
                if fixed is None:
                    fixed = list(values)
                fixed[i] = None  # an entry the env step leaves out
                problems.append("[%d] was %s" % (i, problem))
        if fixed is not None:
            if bad is None:
                bad = {}
            shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
            bad[list_key] = (tuple(fixed), shown)
    return bad


def _left_out(
    record: SpanRecord,
    bad: dict[str, tuple[Any, str]],
    report: Callable[[SpanFormatError], None],
    source: str | None,
    line: int | None,
) -> SpanRecord:
    attributes = dict(record.attributes)
    lossy = dict(record.lossy)
    for key, (replacement, problem) in bad.items():
        if replacement is None:
            del attributes[key]
            what = left_out(key, problem)
        else:  # a vector step's list: the bad entries only
            attributes[key] = replacement
            what = "%s%s; those entries left out (read as absent)" % (key, problem)
        lossy.setdefault(key, what)
        report(
            SpanDecodeError(
                "span %s (id %016x): %s" % (_quote(record.name), record.span_id, what),
                source=source,
                line=line,
            )
        )
    return record._replace(attributes=attributes, lossy=lossy)


__all__ = ["VALUE_KINDS", "check_values"]

"""How an episode and its steps ended: status and errors read from span records, and which
steps it had.

Part of the one assembler (:mod:`agenttrace.trajectory.assembler`): an episode span that says
its status is taken at its word; one that does not (another tracer's, read through a
conventions mapping) gets a status derived from its spans, with the one rule for caught
errors (docs/tracing-api.md, Errors). Its length and missing steps are bounded by the steps
its spans show (:class:`StepIndices`): nothing is allocated from a claimed number.
"""

from __future__ import annotations

from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory import genai
from agenttrace.trajectory.model import EpisodeError, Step
from agenttrace.trajectory.records import SpanRecord, described, left_out, value_problem

#: Steps an episode is taken to miss (without a span) are at most as many as it has spans for,
#: or this many: a length claim beyond that is left out (read as absent), and a longer list of
#: missing steps is cut (docs/trace-storage.md, "Bad values").
MISSING_STEPS_FLOOR = 1024

#: Spans whose exception makes their episode errored, even when the runner caught it.
ERROR_ROLES = frozenset({sc.ENV_RESET, sc.ENV_STEP, sc.AGENT_ACT})


#: The error of an episode span that failed without saying why (a runner's ``error=True``,
#: an ERROR status without a description), when no span under it recorded an exception.
UNKNOWN_ERROR = "the episode failed; no exception or message was recorded"


def episode_error(
    episode_span: SpanRecord | None, failure: SpanRecord | None = None
) -> EpisodeError | None:
    """The error of a failed episode span: its own exception or message; when it failed
    without saying why (a flag), the error of ``failure`` (the failed step span that caused
    it, see :func:`is_failure`); failing that, :data:`UNKNOWN_ERROR`."""
    if episode_span is None:
        return None
    if episode_span.status_code == "ERROR" or any(
        event.name == sc.EXCEPTION_EVENT for event in episode_span.events
    ):
        error = span_error(episode_span)
        if error.type is None and not error.message and failure is not None:
            error = span_error(failure)
        if error.type is None and not error.message:
            return EpisodeError(type=None, message=UNKNOWN_ERROR)
        return error
    return None


def is_failure(record: SpanRecord, first: SpanRecord | None) -> bool:
    """Whether a failed ``record`` is the first failure of its episode that counts."""
    if first is not None and first.start_time <= record.start_time:
        return False
    name = record.name
    return name in ERROR_ROLES or (
        name != sc.EPISODE and genai.call_kind(record) == genai.MODEL_CALL
    )


def span_error(record: SpanRecord) -> EpisodeError:
    """The error a failed span recorded (its exception event, else its status message)."""
    for event in reversed(record.events):
        if event.name == sc.EXCEPTION_EVENT:
            attrs = event.attributes
            return EpisodeError(
                type=attrs.get(sc.EXCEPTION_TYPE),
                message=attrs.get(sc.EXCEPTION_MESSAGE),
                stack=attrs.get(sc.EXCEPTION_STACKTRACE),
            )
    return EpisodeError(type=None, message=record.status_message)


def derived_status(episode_span: SpanRecord, last: Step | None) -> str:
    """Status of an episode span that did not say (written by another tool)."""
    if episode_span.status_code == "ERROR":
        return sc.STATUS_ERRORED
    if last is not None and last.truncated and not last.terminated:
        return sc.STATUS_TRUNCATED
    if last is None or last.terminated:
        return sc.STATUS_COMPLETED
    return sc.STATUS_TRUNCATED


def step_error(*records: SpanRecord | None) -> str | None:
    """What failed the step: the first of its spans that raised (``"Type: message"``)."""
    for record in records:
        if record is not None and record.status_code == "ERROR":
            return genai.error_text(record)
    return None


class StepIndices:
    """Step indices seen: a bitmap for the dense ones, a set for any far beyond them."""

    __slots__ = ("_bits", "_count", "_far", "highest")

    def __init__(self) -> None:
        self._bits = bytearray()
        self._far: set[int] = set()
        self._count = 0
        self.highest = -1

    def add(self, index: int) -> None:
        bits = self._bits
        if index < len(bits):
            if not bits[index]:
                bits[index] = 1
                self._count += 1
        elif index < 2 * len(bits) + 4096:  # dense: grow the bitmap
            bits.extend(bytes(max(index + 1 - len(bits), len(bits))))
            if self._far:  # (far ones it now covers move in: counted once, in any order)
                near = [i for i in self._far if i < len(bits)]
                for i in near:
                    bits[i] = 1
                self._far.difference_update(near)
            if not bits[index]:
                bits[index] = 1
                self._count += 1
        elif index not in self._far:
            self._far.add(index)
            self._count += 1
        if index > self.highest:
            self.highest = index

    def __contains__(self, index: int) -> bool:
        bits = self._bits
        return bits[index] == 1 if index < len(bits) else index in self._far

    def __len__(self) -> int:
        return self._count

    def covers(self, length: int) -> bool:
        """Whether every index ``0 .. length-1`` is in the set."""
        if self._count < length:
            return False
        return all(index in self for index in range(length))

    def allowance(self) -> int:
        """How many steps may be missing: as many as were seen, at least the floor."""
        return max(self._count, MISSING_STEPS_FLOOR)

    def credible(self, length: int) -> bool:
        """Whether an episode with these steps may have ``length`` (see MISSING_STEPS_FLOOR)."""
        return length <= self.highest + 1 or length - self._count <= self.allowance()

    def missing_below(self, length: int, limit: int) -> list[int]:
        """The first ``limit`` indices below ``length`` that are not in the set; the loop
        runs at most ``limit`` + (indices in the set) times, whatever ``length`` is."""
        missing: list[int] = []
        bits, far = self._bits, self._far
        end = min(length, len(bits))
        index = bits.find(0, 0, end) if end > 0 else -1
        while index >= 0 and len(missing) < limit:
            missing.append(index)
            index = bits.find(0, index + 1, end)
        index = len(bits)
        while index < length and len(missing) < limit:
            if index not in far:
                missing.append(index)
            index += 1
        return missing

    def count_below(self, length: int) -> int:
        """How many indices below ``length`` are in the set."""
        bits = self._bits
        return bits.count(1, 0, min(length, len(bits))) + sum(1 for i in self._far if i < length)

    def length(self, claim: Any, problems: dict[str, str]) -> tuple[int | None, list[int]]:
        """The episode's length from its span's claim (None: not known, the steps say) and its
        missing steps, both bounded by the steps seen (MISSING_STEPS_FLOOR); what was left
        out or cut goes to ``problems`` (field -> reason)."""
        if claim is not None:
            problem = value_problem(sc.EPISODE_LENGTH, claim)
            if problem is None and not self.credible(claim):
                problem = "%s, far beyond the %d step(s) the spans show (highest index %d)" % (
                    described(claim),
                    self._count,
                    self.highest,
                )
            if problem is not None:
                problems["length"] = left_out(sc.EPISODE_LENGTH, problem)
                claim = None
        expected = self.highest + 1 if claim is None else claim
        limit = self.allowance()
        missing = self.missing_below(expected, limit)
        if len(missing) == limit:
            total = expected - self.count_below(expected)
            if total > limit:
                problems["missing_steps"] = (
                    "the first %d of the %d steps without a span are listed (at most as many "
                    "as have spans, or %d)" % (limit, total, MISSING_STEPS_FLOOR)
                )
        return claim, missing

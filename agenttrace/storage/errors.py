"""What the span readers report instead of raising: one error per line, span or value skipped.

:class:`SpanFormatError` is input that is not readable OTLP at all (not JSON, torn, not an
export request, a span without ids ...). :class:`SpanDecodeError`, a kind of it, is span data
that is well formed but could not be taken in as it is: JSON nested past
:data:`~agenttrace.trajectory.codec.MAX_DEPTH` or Python's recursion limit, an ``rl.*`` value
of the wrong type or out of range (left out, the rest of the span kept), an episode length
claim far beyond its steps, data compressed with a codec whose package is missing.
``agenttrace export`` counts the second kind apart and exits 3 ("partial") when there was any.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from agenttrace.trajectory.codec import MAX_DEPTH

#: Why a line (document, frame) nested past Python's recursion limit is skipped.
TOO_DEEP = (
    "JSON nested too deeply to read (past Python's recursion limit; values may nest at most "
    "%d levels), skipped" % MAX_DEPTH
)


class SpanFormatError(ValueError):
    """A line, span or file that is not readable OTLP/JSON; says where, so it can be fixed.

    ``source`` (file name), ``line`` (1-based) and ``span`` (0-based index of the span in its
    line) are set when known; ``reason`` is the message without the location. ``skipped`` is
    how many spans a bad resource or scope block cost (see :attr:`spans_lost`).
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str | None = None,
        line: int | None = None,
        span: int | None = None,
        skipped: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.line = line
        self.span = span
        self.skipped = skipped
        where = ""
        if source is not None:
            where = source + (":%d" % line if line is not None else "") + ": "
        elif line is not None:
            where = "line %d: " % line
        if span is not None:
            where += "span %d: " % span
        super().__init__(where + reason)

    @property
    def spans_lost(self) -> int:
        """Spans this problem cost (what OTLP partial success reports as rejected): those of a
        skipped block, one for a bad span, none for a problem that cost no span."""
        if self.skipped is not None:
            return self.skipped
        return 1 if self.span is not None else 0

    def located(self, source: str | None, line: int | None) -> SpanFormatError:
        """The same error with the file and line it came from filled in."""
        return type(self)(
            self.reason, source=source, line=line, span=self.span, skipped=self.skipped
        )


class SpanDecodeError(SpanFormatError):
    """Span data that is well formed but could not be decoded as it is (see the module doc):
    the line or value is skipped, everything else is kept."""


def error_kind(error: BaseException) -> type[SpanFormatError]:
    """What a problem is reported as: nesting past the stack or a value that cannot be
    decoded (SpanDecodeError), or input that is not readable OTLP (SpanFormatError)."""
    if isinstance(error, (RecursionError, SpanDecodeError)):
        return SpanDecodeError
    return SpanFormatError


def reason_of(error: BaseException) -> str:
    """What a problem met while decoding is reported as (without where it is)."""
    if isinstance(error, RecursionError):
        return "nested too deeply to read (over Python's recursion limit)"
    if isinstance(error, SpanFormatError):
        return error.reason
    return "%s: %s" % (type(error).__name__, error)


class SpanFormatWarning(UserWarning):
    """Category of the warnings the readers give by default for unreadable lines or spans."""


#: What the readers call with each problem they skip (default: :func:`warn`).
ErrorHandler = Callable[[SpanFormatError], None]


def warn(error: SpanFormatError) -> None:
    """The readers' default error handler: each problem as a :class:`SpanFormatWarning`."""
    warnings.warn(str(error), SpanFormatWarning, stacklevel=3)


class ReadPosition:
    """Where a reader is: the file (or source) and line (frame) of the records it handed out
    last. Readers given one keep it up to date, a line at a time, so whoever consumes their
    records can say where one came from (``agenttrace export`` names the line of an episode
    span whose values the assembler left out)."""

    __slots__ = ("line", "source")

    def __init__(self, source: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.line = line

    def error(self, reason: str) -> SpanDecodeError:
        """A SpanDecodeError located here."""
        return SpanDecodeError(reason, source=self.source, line=self.line)

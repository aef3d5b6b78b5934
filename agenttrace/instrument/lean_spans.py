"""agenttrace's own spans, started and filled without the SDK's per-span work they never need.

``Tracer.start_span`` asks the sampler, generates ids, and checks every attribute value; each
``set_attributes`` checks the values again. agenttrace's step spans carry attributes it built
itself (strings, numbers, booleans, homogeneous tuples: already clean), on a provider whose
sampler, id generator and limits are usually the SDK's defaults. For exactly that case this
module starts the same SDK ``Span`` objects (so every span processor and exporter on the
provider gets a standard span, started and ended through the provider's own processor) with:

* the default sampler's decision taken directly (``ParentBased(ALWAYS_ON)``: sampled unless
  the parent says otherwise; the parent's trace state kept), the SDK's own tracer metrics
  hook still called;
* random ids from the same source as ``RandomIdGenerator``;
* attributes put into the span's attribute dict without a second validation, under the span's
  lock, within the provider's attribute count limit.

Any other configuration (a user's sampler or id generator, attribute length or count limits
that could cut our values, another SDK layout) gets ``Tracer.start_span`` and
``Span.set_attributes`` as before. Measured in benchmarks/overhead.py.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

try:
    from opentelemetry.sdk import trace as sdk_trace
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.util import BoundedList
except ImportError:  # (the API alone: there is nothing to make cheaper)
    sdk_trace = None  # type: ignore[assignment]

#: Fewer attributes than this on a span of ours, always (the SDK's default limit is 128).
_MOST_ATTRIBUTES = 64
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_RANDOM = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)
_SAMPLED_RANDOM = TraceFlags(_SAMPLED | _RANDOM)
_UNSET_STATUS = Status(StatusCode.UNSET)  # (immutable: the SDK shares one default too)
_new_object = object.__new__
_Lock = threading.Lock
_getrandbits = random.getrandbits

SpanStarter = Callable[[str, Any, SpanKind, Mapping[str, Any]], Any]


def lean_starter(tracer: Any) -> SpanStarter | None:
    """``start(name, parent_context, kind, attributes) -> span`` for ``tracer``, or None when
    the tracer is not one this module can start spans for exactly as the SDK would."""
    if sdk_trace is None or type(tracer) is not sdk_trace.Tracer:
        return None
    try:
        if not _default_sampler(tracer.sampler) or type(tracer.id_generator) is not (
            RandomIdGenerator
        ):
            return None
        limits = tracer._span_limits
        if limits.max_span_attribute_length is not None:
            return None
        if limits.max_span_attributes is not None and limits.max_span_attributes < (
            _MOST_ATTRIBUTES
        ):
            return None
        span_class = getattr(sdk_trace, "_Span", sdk_trace.Span)
        if not _layout_ok(tracer, span_class):
            return None
    except Exception:  # (another SDK version: its own path)
        return None
    return _Starter(tracer, span_class).start


def _default_sampler(sampler: Any) -> bool:
    """ALWAYS_ON, or ParentBased(ALWAYS_ON) with its default delegates."""
    if sampler is sampling.ALWAYS_ON:
        return True
    if type(sampler) is not sampling.ParentBased:
        return False
    return (
        sampler._root is sampling.ALWAYS_ON
        and sampler._remote_parent_sampled is sampling.ALWAYS_ON
        and sampler._remote_parent_not_sampled is sampling.ALWAYS_OFF
        and sampler._local_parent_sampled is sampling.ALWAYS_ON
        and sampler._local_parent_not_sampled is sampling.ALWAYS_OFF
    )


def _layout_ok(tracer: Any, span_class: type) -> bool:
    """Whether the SDK objects look as :meth:`_Starter.start` expects (checked once)."""
    probe = span_class(
        name="probe",
        context=SpanContext(1, 1, is_remote=False),
        limits=tracer._span_limits,
    )
    inner = getattr(probe._attributes, "_dict", None)
    return (
        isinstance(inner, dict)
        and hasattr(probe, "_lock")
        and hasattr(probe, "_end_time")
        and hasattr(tracer, "_tracer_metrics")
        and hasattr(tracer, "_instrumentation_scope")
        and callable(getattr(tracer, "_is_enabled", None))
    )


#: What ``Span.__init__`` sets on a span of ours, and on its attribute dict's container: the
#: fast construction below sets exactly these, or is not used.
_SPAN_FIELDS = frozenset(
    {
        "_attributes", "_context", "_end_time", "_events", "_instrumentation_info",
        "_instrumentation_scope", "_kind", "_limits", "_links", "_lock", "_name", "_parent",
        "_record_end_metrics", "_record_exception", "_resource", "_sampler",
        "_set_status_on_exception", "_span_processor", "_start_time", "_status",
        "_trace_config",
    }
)  # fmt: skip
_ATTRIBUTE_FIELDS = frozenset(
    {"_dict", "_immutable", "_lock", "dropped", "max_value_len", "maxlen"}
)


class _Starter:
    __slots__ = ("_fixed", "_limits", "_metrics", "_new_span", "_span_class", "_tracer")

    def __init__(self, tracer: Any, span_class: type) -> None:
        self._tracer = tracer
        self._span_class = span_class
        self._metrics = tracer._tracer_metrics
        self._limits = tracer._span_limits
        # The fields every span of this tracer shares, as Span.__init__ sets them.
        self._fixed = {
            "_instrumentation_info": tracer.instrumentation_info,
            "_instrumentation_scope": tracer._instrumentation_scope,
            "_resource": tracer.resource,
            "_sampler": tracer.sampler,
            "_trace_config": None,
            "_record_exception": True,
            "_set_status_on_exception": True,
            "_span_processor": tracer.span_processor,
            "_limits": self._limits,
            "_start_time": None,
            "_end_time": None,
        }
        self._new_span = self._construct if self._construction_matches() else self._sdk_construct

    def _construction_matches(self) -> bool:
        """Whether :meth:`_construct` gives a span with exactly the fields the SDK's
        constructor gives (checked once; another SDK version gets the constructor)."""
        try:
            context = SpanContext(1, 1, is_remote=False)
            ours = self._construct("probe", context, None, SpanKind.INTERNAL, {"k": 1}, None)
            sdk = self._sdk_construct("probe", context, None, SpanKind.INTERNAL, {"k": 1}, None)
            return (
                set(vars(ours)) == set(vars(sdk)) == _SPAN_FIELDS
                and set(vars(ours._attributes)) == set(vars(sdk._attributes)) == _ATTRIBUTE_FIELDS
                and type(ours._events) is type(sdk._events)
                and type(ours._links) is type(sdk._links)
                and ours._status.status_code is sdk._status.status_code
                and ours._attributes._dict == sdk._attributes._dict
            )
        except Exception:
            return False

    def _sdk_construct(
        self, name: str, context: Any, parent: Any, kind: SpanKind, attributes: Any, metrics: Any
    ) -> Any:
        tracer = self._tracer
        span = self._span_class(
            name=name,
            context=context,
            parent=parent,
            sampler=tracer.sampler,
            resource=tracer.resource,
            span_processor=tracer.span_processor,
            kind=kind,
            instrumentation_info=tracer.instrumentation_info,
            limits=self._limits,
            instrumentation_scope=tracer._instrumentation_scope,
            record_end_metrics=metrics,
        )
        if attributes:
            span._attributes._dict.update(attributes)
        return span

    def _construct(
        self, name: str, context: Any, parent: Any, kind: SpanKind, attributes: Any, metrics: Any
    ) -> Any:
        """``Span.__init__``'s result without its per-span work: the shared fields copied in,
        fresh lock, attribute container, event and link lists."""
        limits = self._limits
        span = _new_object(self._span_class)
        fields = span.__dict__
        fields.update(self._fixed)
        fields["_name"] = name
        fields["_context"] = context
        fields["_parent"] = parent
        fields["_kind"] = kind
        fields["_status"] = _UNSET_STATUS
        fields["_lock"] = _Lock()
        fields["_record_end_metrics"] = metrics
        container = _new_object(BoundedAttributes)
        container.__dict__.update(
            _dict=dict(attributes) if attributes else {},
            maxlen=limits.max_span_attributes,
            dropped=0,
            max_value_len=None,
            _lock=_Lock(),
            _immutable=False,
        )
        fields["_attributes"] = container
        fields["_events"] = BoundedList(limits.max_events)
        fields["_links"] = BoundedList(limits.max_links)
        return span

    def start(self, name: str, context: Any, kind: SpanKind, attributes: Mapping[str, Any]) -> Any:
        tracer = self._tracer
        parent = trace_api.get_current_span(context).get_span_context()
        if not tracer._is_enabled():
            return NonRecordingSpan(context=parent)
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = _getrandbits(128) or 1
            flags = _SAMPLED_RANDOM
            trace_state = None
        else:
            trace_id = parent.trace_id
            parent_flags = parent.trace_flags
            flags = _SAMPLED if parent_flags.sampled else _NOT_SAMPLED
            if getattr(parent_flags, "random_trace_id", False):
                flags = TraceFlags(flags | _RANDOM)
            trace_state = parent.trace_state
        span_id = _getrandbits(64) or 1
        span_context = SpanContext(
            trace_id, span_id, is_remote=False, trace_flags=flags, trace_state=trace_state
        )
        decision = sampling.Decision.RECORD_AND_SAMPLE if flags.sampled else sampling.Decision.DROP
        record_end_metrics = self._metrics.start_span(parent, decision)
        if not flags.sampled:
            return NonRecordingSpan(context=span_context)
        span = self._new_span(name, span_context, parent, kind, attributes, record_end_metrics)
        span.start(parent_context=context)
        return span


def set_clean_attributes(span: Any, attributes: Mapping[str, Any]) -> None:
    """``span.set_attributes(attributes)`` for values agenttrace built (already clean): put
    into the span's attribute dict directly when it is one of the lean spans' SDK ``Span``s,
    still open, and far below its attribute limit; through ``set_attributes`` otherwise."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    lock = getattr(span, "_lock", None)
    if type(inner) is not dict or type(lock) is not _LOCK_TYPE:
        span.set_attributes(attributes)
        return
    with lock:
        if span._end_time is None and len(inner) + len(attributes) < _MOST_ATTRIBUTES:
            inner.update(attributes)
            return
    span.set_attributes(attributes)


_LOCK_TYPE = type(threading.Lock())

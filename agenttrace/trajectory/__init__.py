"""Trajectory model, value encoding, span records and the one assembler."""

from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.codec import UnserializableValueWarning
from agenttrace.trajectory.conventions import Conventions, ConventionsError, SpanRule
from agenttrace.trajectory.equality import values_equal
from agenttrace.trajectory.model import (
    SCHEMA,
    EpisodeError,
    LLMCall,
    Step,
    ToolCall,
    Trajectory,
    TrajectoryFormatError,
)
from agenttrace.trajectory.records import SpanEvent, SpanLink, SpanRecord, record_from_span
from agenttrace.trajectory.stream import AssemblyCounts, StreamingAssembler, assemble

__all__ = [
    "SCHEMA",
    "AssemblyCounts",
    "Conventions",
    "ConventionsError",
    "EpisodeError",
    "LLMCall",
    "SpanEvent",
    "SpanLink",
    "SpanRecord",
    "SpanRule",
    "Step",
    "StreamingAssembler",
    "ToolCall",
    "Trajectory",
    "TrajectoryFormatError",
    "UnserializableValueWarning",
    "assemble",
    "build_trajectory",
    "record_from_span",
    "values_equal",
]

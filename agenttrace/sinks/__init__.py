"""Where finished trajectories go, and how to load them back.

Sinks: :class:`JsonlSink` (one line per episode, rotated by size), :class:`ParquetSink`
(columnar part files; needs pyarrow: the ``parquet`` extra), :class:`StepTablesSink`
(typed step and episode tables for training, Parquet too), :class:`JsonDirSink` (one
file per episode), :class:`OtlpLogSink` (one OpenTelemetry log record per episode) and
:class:`CallbackSink` (your function). Read files back with :func:`load_trajectories` or
:func:`iter_trajectories`. docs/sinks.md describes every file layout.
"""

from agenttrace.sinks.base import Sink
from agenttrace.sinks.callback import CallbackSink
from agenttrace.sinks.files import (
    TrajectoryLoadError,
    iter_trajectories,
    load_trajectories,
    safe_filename,
)
from agenttrace.sinks.jsondir import JsonDirSink
from agenttrace.sinks.jsonl import JsonlSink
from agenttrace.sinks.otlp_logs import OtlpLogSink
from agenttrace.sinks.parquet import ParquetSink
from agenttrace.sinks.step_tables import StepTablesSink, read_step_tables

__all__ = [
    "CallbackSink",
    "JsonDirSink",
    "JsonlSink",
    "OtlpLogSink",
    "ParquetSink",
    "Sink",
    "StepTablesSink",
    "TrajectoryLoadError",
    "iter_trajectories",
    "load_trajectories",
    "read_step_tables",
    "safe_filename",
]

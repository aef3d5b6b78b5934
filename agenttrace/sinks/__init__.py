"""Where finished trajectories go.

Sinks: :class:`JsonlSink` (one line per episode, rotated by size), :class:`ParquetSink`
(columnar part files; needs pyarrow: the ``parquet`` extra), :class:`StepTablesSink`
(typed step and episode tables for training, Parquet too), :class:`JsonDirSink` (one
file per episode), :class:`OtlpLogSink` (one OpenTelemetry log record per episode) and
:class:`CallbackSink` (your function). docs/sinks.md describes every file layout.

Sinks only write. :mod:`agenttrace.reading` loads every format back, and sinks never import it.
(``agenttrace.sinks.load_trajectories``, ``iter_trajectories``, ``TrajectoryLoadError`` and
``read_step_tables``, from before reading had its own package, still work: the public API in
``agenttrace/__init__.py``, above both, sets them here.)
"""

from agenttrace.sinks.base import Sink
from agenttrace.sinks.callback import CallbackSink
from agenttrace.sinks.files import safe_filename
from agenttrace.sinks.jsondir import JsonDirSink
from agenttrace.sinks.jsonl import JsonlSink
from agenttrace.sinks.otlp_logs import OtlpLogSink
from agenttrace.sinks.parquet import ParquetSink
from agenttrace.sinks.step_tables import StepTablesSink

__all__ = [
    "CallbackSink",
    "JsonDirSink",
    "JsonlSink",
    "OtlpLogSink",
    "ParquetSink",
    "Sink",
    "StepTablesSink",
    "safe_filename",
]

"""Loading back what the sinks wrote: the one place every format is read.

Trajectories from JSONL, JSON folders and Parquet (:func:`load_trajectories`,
:func:`iter_trajectories`), with late score records merged in; step tables as Arrow tables
and their columns as the values that were written (:func:`read_step_tables`,
:func:`column_values`). ``agenttrace inspect``, ``agenttrace export`` and your own code read
through it. A bad record is one :class:`TrajectoryLoadError` given to ``on_error`` (by
default a warning), never the loss of the others. docs/sinks.md describes the sources.

Sinks (:mod:`agenttrace.sinks`) only write; this package imports them for their file names
and column layouts, never the reverse.
"""

from agenttrace.reading.errors import TrajectoryLoadError, warn_load_error
from agenttrace.reading.parquet import read_parquet, row_to_trajectory
from agenttrace.reading.scores import read_scores
from agenttrace.reading.step_tables import column_values, decoded_column, read_step_tables
from agenttrace.reading.trajectories import before_reading, iter_trajectories, load_trajectories

__all__ = [
    "TrajectoryLoadError",
    "before_reading",
    "column_values",
    "decoded_column",
    "iter_trajectories",
    "load_trajectories",
    "read_parquet",
    "read_scores",
    "read_step_tables",
    "row_to_trajectory",
    "warn_load_error",
]

"""Trajectories from Parquet files, one row each, equal to what
:class:`~agenttrace.sinks.ParquetSink` wrote.

The column layout (and which columns hold the codec's JSON text) is the sink's:
:mod:`agenttrace.sinks.parquet`. Rows are read a batch at a time, so memory stays bounded;
one bad row costs that row only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from agenttrace.reading.errors import TrajectoryLoadError, record_error, warn_load_error
from agenttrace.sinks.parquet import JSON_COLUMNS, STEP_JSON_FIELDS, require_pyarrow
from agenttrace.trajectory.model import Trajectory, TrajectoryFormatError


def _json_column(text: str | None, where: str) -> Any:
    """A column's JSON text parsed; text that does not parse breaks the schema at ``where``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise TrajectoryFormatError(f"{where}: not valid JSON text: {exc}", field=where) from exc
    except RecursionError:
        raise TrajectoryFormatError(
            f"{where}: nested too deeply to read (over Python's recursion limit)", field=where
        ) from None


def row_to_trajectory(row: dict[str, Any]) -> Trajectory:
    """Inverse of :func:`trajectory_to_row`, through ``Trajectory.from_dict`` and the codec
    (which checks every field: docs/trajectory-format.md, "Validation")."""
    data = dict(row)
    for key in JSON_COLUMNS:
        data[key] = _json_column(data.get(key), key)
    steps = []
    for number, step in enumerate(data.get("steps") or ()):
        step = dict(step)
        for key in STEP_JSON_FIELDS:
            step[key] = _json_column(step.get(key), f"steps[{number}].{key}")
        # Floats go through the codec as themselves; NaN/inf arrive as native floats.
        steps.append(step)
    data["steps"] = steps
    if data.get("attributes") is None:
        data["attributes"] = {}
    for key in ("lossy", "scores"):  # Arrow maps read back as (key, value) pairs
        if isinstance(data.get(key), list):
            data[key] = dict(data[key])
    return Trajectory.from_dict(data)


def read_parquet(
    path: str | os.PathLike,
    *,
    on_error: Callable[[TrajectoryLoadError], Any] | None = None,
    batch_rows: int = 64,
) -> Iterator[Trajectory]:
    """Yield the trajectories of one Parquet file, equal to what was written.

    A row that cannot be rebuilt becomes a :class:`TrajectoryLoadError` (row numbers from 0)
    given to ``on_error`` (default: a warning); the other rows still load. Rows are read
    ``batch_rows`` at a time, so memory stays bounded for large episodes.
    """
    pa, pq = require_pyarrow()
    report = on_error or warn_load_error
    read_errors = (OSError, ValueError, pa.ArrowException)
    try:
        parquet_file = pq.ParquetFile(path)
        names = parquet_file.schema_arrow.names
    except read_errors as exc:
        report(TrajectoryLoadError(path, None, f"cannot read Parquet file: {exc}"))
        return
    missing = [name for name in ("episode_id", "steps") if name not in names]
    if missing:
        report(
            TrajectoryLoadError(
                path, None, f"not an agenttrace trajectory file: no column {', '.join(missing)}"
            )
        )
        return
    row_index = 0
    batches = parquet_file.iter_batches(batch_size=batch_rows)
    while True:
        try:
            batch = next(batches, None)
            rows = None if batch is None else batch.to_pylist()
        except read_errors as exc:
            report(TrajectoryLoadError(path, row_index, f"cannot read rows from here on: {exc}"))
            return
        if rows is None:
            return
        for row in rows:
            try:
                trajectory = row_to_trajectory(row)
            except Exception as exc:  # one bad row never costs the others
                report(record_error(path, row_index, exc))
            else:
                yield trajectory
            row_index += 1

"""Parquet sink: one row per trajectory, written in finished part files.

pyarrow is imported only when a sink is created or a row is built (the ``parquet`` extra).
A part is written under a ``.partial`` name and renamed to ``<basename>-NNNNN.parquet``
only when complete (on ``flush()``, ``close()`` or after ``rows_per_file`` rows), so readers
never see a half-written file; a crash loses at most the rows of the part in progress. The
column layout is in docs/sinks.md; :mod:`agenttrace.reading.parquet` reads the rows back.
"""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenttrace._version import install_hint
from agenttrace.sinks.files import utf8_safe
from agenttrace.sinks.jsonl import check_basename
from agenttrace.sinks.names import TRAJECTORIES_BASENAME
from agenttrace.sinks.parts import PartWriter
from agenttrace.sinks.scores import score_batch
from agenttrace.trajectory.codec import encode
from agenttrace.trajectory.model import Trajectory, content_json
from agenttrace.trajectory.scores import Score

if TYPE_CHECKING:
    import pyarrow as pa

_encode_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def _dump(value: Any) -> str:
    return utf8_safe(_encode_json(value))


#: Columns holding JSON text in the codec's value encoding, decoded on read.
JSON_COLUMNS = ("error", "attributes", "final_observation", "reset_info")
STEP_JSON_FIELDS = ("observation", "action", "info", "llm_calls", "tool_calls")
#: Rows buffered before they are written out as one row group (also bounded by bytes).
ROW_GROUP_ROWS = 256
ROW_GROUP_BYTES = 64 * 1024 * 1024


def require_pyarrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, or an ImportError that says how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(
            "the Parquet sink and reader need pyarrow: " + install_hint("parquet")
        ) from exc
    return pa, pq


def arrow_schema() -> pa.Schema:
    """The Arrow schema of a trajectory row (see docs/sinks.md)."""
    pa, _ = require_pyarrow()
    step = pa.struct(
        [
            ("index", pa.int64()),
            ("observation", pa.string()),
            ("action", pa.string()),
            ("reward", pa.float64()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("discount", pa.float64()),
            ("info", pa.string()),
            ("start_time", pa.int64()),
            ("end_time", pa.int64()),
            ("llm_calls", pa.string()),
            ("tool_calls", pa.string()),
            ("error", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("schema", pa.string()),
            ("episode_id", pa.string()),
            ("trace_id", pa.string()),
            ("task_id", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("start_time", pa.int64()),
            ("end_time", pa.int64()),
            ("return", pa.float64()),
            ("length", pa.int64()),
            ("attributes", pa.string()),
            ("steps", pa.list_(step)),
            ("final_observation", pa.string()),
            ("reset_info", pa.string()),
            ("missing_steps", pa.list_(pa.int64())),
            ("lossy", pa.map_(pa.string(), pa.string())),
            ("scores", pa.map_(pa.string(), pa.float64())),
        ]
    )


def chat_arrow_schema() -> pa.Schema:
    """The Arrow schema of a chat row (``agenttrace export --format chat``; docs/cli.md).

    ``messages`` is a list of structs as fine-tuning tools expect; a message's ``content``
    that is not text (a list of parts) and its ``tool_calls`` are JSON text.
    """
    pa, _ = require_pyarrow()
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("name", pa.string()),
            ("tool_call_id", pa.string()),
            ("tool_calls", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("step", pa.int64()),
            ("call", pa.int64()),
            ("model", pa.string()),
            ("messages", pa.list_(message)),
            ("tools", pa.string()),
            ("finish_reasons", pa.list_(pa.string())),
            ("reward", pa.float64()),
            ("return", pa.float64()),
            ("terminated", pa.bool_()),
            ("truncated", pa.bool_()),
            ("status", pa.string()),
            ("lossy", pa.bool_()),
        ]
    )


def _message_row(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    tool_calls = message.get("tool_calls")
    return {
        "role": None if message.get("role") is None else str(message["role"]),
        "content": content if content is None or isinstance(content, str) else _dump(content),
        "name": message.get("name"),
        "tool_call_id": message.get("tool_call_id"),
        "tool_calls": None if tool_calls is None else _dump(tool_calls),
    }


def chat_rows_to_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Chat rows (:func:`agenttrace.trajectory.chat.chat_rows`) as one Arrow batch."""
    import pyarrow as pa

    columns = {
        "messages": [[_message_row(m) for m in row["messages"]] for row in rows],
        "tools": [None if row["tools"] is None else _dump(row["tools"]) for row in rows],
        "reward": [_as_float(row["reward"], "reward") for row in rows],
        "return": [_as_float(row["return"], "return") for row in rows],
    }
    arrays = [
        pa.array(columns[f.name] if f.name in columns else [row[f.name] for row in rows], f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _as_float(value: Any, what: str) -> float | None:
    """Rewards, discounts and returns are float64 columns: numbers only (NaN/inf kept)."""
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{what} must be a real number or None for Parquet, got {type(value).__name__}")


def trajectory_to_row(trajectory: Trajectory) -> dict[str, Any]:
    """One Parquet row as a dict: plain columns for scalars, codec JSON text for values."""
    return trajectory_to_batch(trajectory, arrow_schema()).to_pylist()[0]


def trajectory_to_batch(trajectory: Trajectory, schema: pa.Schema) -> pa.RecordBatch:
    """The row of :func:`trajectory_to_row` as a one-row Arrow batch, built column by column.

    Three times faster than ``RecordBatch.from_pylist`` on per-step dicts. Content still
    held as raw JSON text (the live rebuild) is copied, not decoded.
    """
    import pyarrow as pa

    episode = trajectory.episode_id
    steps = trajectory.steps
    step_type = schema.field("steps").type.value_type

    def floats(name: str) -> list[float | None]:
        return [
            _as_float(getattr(s, name), f"{name} of episode {episode!r} step {s.index}")
            for s in steps
        ]

    def calls(name: str) -> list[str]:
        return [
            _dump([c.to_dict() for c in getattr(s, name)]) if getattr(s, name) else "[]"
            for s in steps
        ]

    step_columns = [
        [s.index for s in steps],
        [utf8_safe(content_json(s, "observation")) for s in steps],
        [utf8_safe(content_json(s, "action")) for s in steps],
        floats("reward"),
        [bool(s.terminated) for s in steps],
        [bool(s.truncated) for s in steps],
        floats("discount"),
        [utf8_safe(content_json(s, "info")) for s in steps],
        [s.start_time for s in steps],
        [s.end_time for s in steps],
        calls("llm_calls"),
        calls("tool_calls"),
        [s.error for s in steps],
    ]
    struct = pa.StructArray.from_arrays(
        [pa.array(values, type=f.type) for values, f in zip(step_columns, step_type, strict=True)],
        fields=list(step_type),
    )
    steps_array = pa.ListArray.from_arrays(pa.array([0, len(steps)], pa.int32()), struct)
    error = trajectory.error
    top = {
        "schema": trajectory.schema,
        "episode_id": episode,
        "trace_id": trajectory.trace_id,
        "task_id": trajectory.task_id,
        "status": trajectory.status,
        "error": None if error is None else _dump(error.to_dict()),
        "start_time": trajectory.start_time,
        "end_time": trajectory.end_time,
        "return": _as_float(trajectory.return_, f"return of episode {episode!r}"),
        "length": trajectory.length,
        "attributes": _dump(encode(trajectory.attributes)),
        "final_observation": utf8_safe(content_json(trajectory, "final_observation")),
        "reset_info": utf8_safe(content_json(trajectory, "reset_info")),
        "missing_steps": [int(index) for index in trajectory.missing_steps],
        "lossy": list(trajectory.lossy.items()),
        "scores": list(trajectory.scores.items()),
    }
    arrays = [
        steps_array if f.name == "steps" else pa.array([top[f.name]], type=f.type) for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class ParquetSink:
    """Writes trajectories as rows of ``folder/<basename>-00000.parquet``, ``-00001``, ...

    Every ``flush()`` and ``close()`` finishes the part in progress (so it is readable); the
    next write starts a new part. A part is also finished after ``rows_per_file`` rows.
    Numbering continues after parts already in the folder, so a rerun never overwrites
    (:class:`~agenttrace.sinks.parts.PartWriter`).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        basename: str = TRAJECTORIES_BASENAME,
        rows_per_file: int = 10_000,
        compression: str = "zstd",
    ) -> None:
        self._pa, self._pq = require_pyarrow()
        self.folder = Path(folder)
        self.basename = check_basename(basename)
        self._schema = arrow_schema()
        self._parts = PartWriter(
            folder,
            basename=self.basename,
            rows_per_file=rows_per_file,
            row_group_rows=ROW_GROUP_ROWS,
            row_group_bytes=ROW_GROUP_BYTES,
            compression=compression,
        )
        self._scores: PartWriter | None = None
        self._closed = False

    @property
    def paths(self) -> list[Path]:
        """The finished part files this sink wrote, oldest first."""
        return list(self._parts.paths)

    def write(self, trajectory: Trajectory) -> None:
        """Buffer one row; rows go out in row groups, parts finish at ``rows_per_file``.

        The row is converted to Arrow here, so a trajectory Parquet cannot hold (say, a time
        beyond int64) fails alone in its own ``write`` instead of spoiling a row group.
        """
        if self._closed:
            raise RuntimeError(f"ParquetSink({str(self.folder)!r}) is closed; cannot write")
        try:
            batch = trajectory_to_batch(trajectory, self._schema)
        except (self._pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"episode {trajectory.episode_id!r} cannot be stored in Parquet: {exc}"
            ) from exc
        self._parts.add(batch)

    def write_score(self, score: Score) -> None:
        """A score that came after its episode's row: a row of the scores table
        (``scores-NNNNN.parquet`` beside the trajectories; loaders merge it)."""
        if self._scores is None:
            self._scores = PartWriter(
                self.folder,
                basename="scores",
                rows_per_file=self._parts.rows_per_file,
                row_group_rows=ROW_GROUP_ROWS,
                row_group_bytes=ROW_GROUP_BYTES,
                compression=self._parts.compression,
            )
        self._scores.add(score_batch(score))

    def flush(self) -> None:
        """Finish the part in progress so it is a complete, readable file."""
        self._parts.finish()
        if self._scores is not None:
            self._scores.finish()

    def close(self) -> None:
        """Finish the part in progress; later writes raise."""
        if self._closed:
            return
        self._closed = True
        self.flush()

    def __repr__(self) -> str:
        return f"ParquetSink({str(self.folder)!r}, basename={self.basename!r})"


__all__ = [
    "ParquetSink",
    "arrow_schema",
    "trajectory_to_batch",
    "trajectory_to_row",
]

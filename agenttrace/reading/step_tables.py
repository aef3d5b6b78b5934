"""Step tables back as the values that were written: numpy arrays in their dtype and shape,
dicts and tuples rebuilt, encoded columns decoded by the codec.

The tables' layout (folders, field metadata keys) is the sink's:
:mod:`agenttrace.sinks.step_tables` and docs/step-tables.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agenttrace.semconv import GROUP_ID
from agenttrace.sinks.step_tables import (
    CONTAINER_KEY,
    DTYPE_KEY,
    ENCODED,
    ENCODING_KEY,
    EPISODES_FOLDER,
    SHAPE_KEY,
    STEPS_FOLDER,
    load_pyarrow,
)
from agenttrace.trajectory.codec import loads
from agenttrace.trajectory.model import EpisodeError, Step, Trajectory


def column_values(table: Any, name: str) -> Any:
    """A column of a step table as the values that were written.

    A typed array column comes back as one numpy array of shape ``(rows, *shape)`` in the
    dtype recorded in its metadata (null rows are an error: use :func:`decoded_column`); an
    encoded column as a list of decoded values; a struct column (Dict and Tuple spaces) as a
    list of dicts or tuples whose children are rebuilt the same way, arrays and numpy
    scalars in their dtype; any other column as ``to_pylist()``.
    """
    field = table.schema.field(name)
    metadata = field.metadata or {}
    column = table.column(name)
    if metadata.get(ENCODING_KEY) == ENCODED:
        return decoded_column(column)
    if load_pyarrow().types.is_struct(field.type):
        return _rebuilt(field, column.combine_chunks())
    if DTYPE_KEY in metadata:
        dtype = np.dtype(metadata[DTYPE_KEY].decode())
        shape = tuple(json.loads(metadata[SHAPE_KEY]))
        if column.null_count:
            raise ValueError(f"column {name!r} has missing values; read it with to_pylist()")
        flat = column.combine_chunks()
        for _ in shape:
            flat = flat.flatten()
        return np.asarray(flat.to_numpy(zero_copy_only=False), dtype=dtype).reshape(
            (len(column), *shape)
        )
    return column.to_pylist()


def _rebuilt(field: Any, array: Any) -> list[Any]:
    """The values of one (possibly nested) column, as they were written."""
    pa = load_pyarrow()
    metadata = field.metadata or {}
    if metadata.get(ENCODING_KEY) == ENCODED:
        return decoded_column(array)
    if pa.types.is_struct(field.type):
        names = [field.type.field(i).name for i in range(field.type.num_fields)]
        children = [
            _rebuilt(field.type.field(i), array.field(i)) for i in range(field.type.num_fields)
        ]
        rows: list[Any] = []
        for row in range(len(array)):
            if not array[row].is_valid:
                rows.append(None)
            elif metadata.get(CONTAINER_KEY) == b"tuple":
                rows.append(tuple(child[row] for child in children))
            else:
                rows.append({key: child[row] for key, child in zip(names, children, strict=True)})
        return rows
    if DTYPE_KEY in metadata:
        dtype = np.dtype(metadata[DTYPE_KEY].decode())
        shape = tuple(json.loads(metadata[SHAPE_KEY]))
        out: list[Any] = []
        for value in array.to_pylist():
            if value is None:
                out.append(None)
            elif shape:
                out.append(np.asarray(value, dtype=dtype).reshape(shape))
            else:
                out.append(dtype.type(value))
        return out
    return array.to_pylist()


def decoded_column(column: Any) -> list[Any]:
    """An encoded (JSON text) column's values, decoded by the codec (numpy arrays and all)."""
    return [None if text is None else loads(text) for text in column.to_pylist()]


def read_step_tables(folder: str | os.PathLike) -> tuple[Any, Any]:
    """(steps, episodes) of a step-tables folder as Arrow tables, all part files of each."""
    import pyarrow.parquet as pq

    root = Path(folder)
    tables = []
    for name in (STEPS_FOLDER, EPISODES_FOLDER):
        parts = sorted((root / name).glob("*.parquet"))
        if not parts:
            raise FileNotFoundError(f"no {name} part files in {root / name}")
        tables.append(_concat([pq.read_table(part) for part in parts]))
    return tables[0], tables[1]


def is_step_tables(folder: str | os.PathLike) -> bool:
    """True for a folder the steps sink wrote (its steps and episodes part folders)."""
    root = Path(folder)
    return all(any((root / name).glob("*.parquet")) for name in (STEPS_FOLDER, EPISODES_FOLDER))


def step_table_trajectories(
    folder: str | os.PathLike, *, episode_ids: Iterable[str] | None = None
) -> Iterator[Trajectory]:
    """The trajectories the step tables hold, in the episodes table's order: each episode's
    row with its steps (what the tables keep: no model or tool calls, no step attributes).

    ``episode_ids``: only those (read with a filter, so one episode of a large folder is
    cheap). A row that cannot be rebuilt raises ValueError naming the episode.
    """
    import pyarrow.parquet as pq

    root = Path(folder)
    wanted = None if episode_ids is None else sorted(set(episode_ids))
    where = None if wanted is None else [("episode_id", "in", wanted)]
    tables = []
    for name in (STEPS_FOLDER, EPISODES_FOLDER):
        parts = sorted((root / name).glob("*.parquet"))
        if not parts:
            raise FileNotFoundError(f"no {name} part files in {root / name}")
        tables.append(_concat([pq.read_table(part, filters=where) for part in parts]))
    steps_table, episodes_table = tables
    steps_by_episode: dict[str, list[Step]] = {}
    columns = _columns(steps_table)
    for n, episode_id in enumerate(columns["episode_id"]):
        steps_by_episode.setdefault(episode_id, []).append(
            Step(
                index=columns["index"][n],
                observation=columns["observation"][n],
                action=columns["action"][n],
                reward=columns["reward"][n],
                terminated=bool(columns["terminated"][n]),
                truncated=bool(columns["truncated"][n]),
                discount=columns["discount"][n],
                info=columns["info"][n],
                start_time=columns["start_time"][n],
                end_time=columns["end_time"][n],
                error=columns["error"][n],
            )
        )
    episodes = _columns(episodes_table)
    for n, episode_id in enumerate(episodes["episode_id"]):
        try:
            yield _episode(episodes, n, steps_by_episode.get(episode_id, []))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"episode {episode_id!r} of {root}: {exc}") from exc


def _columns(table: Any) -> dict[str, list[Any]]:
    """Every column of a table as the values that were written, one list each."""
    return {
        field.name: _rebuilt(field, table.column(field.name).combine_chunks())
        for field in table.schema
    }


def _episode(columns: dict[str, list[Any]], n: int, steps: list[Step]) -> Trajectory:
    attributes = columns["attributes"][n] or {}
    if columns["group_id"][n] is not None:
        attributes.setdefault(GROUP_ID, columns["group_id"][n])
    error = None
    if columns["error_type"][n] is not None or columns["error_message"][n] is not None:
        error = EpisodeError(
            type=columns["error_type"][n] or "", message=columns["error_message"][n] or ""
        )
    scores = columns["scores"][n] or []
    return Trajectory(
        episode_id=columns["episode_id"][n],
        trace_id=columns["trace_id"][n],
        task_id=columns["task_id"][n],
        status=columns["status"][n],
        error=error,
        start_time=columns["start_time"][n],
        end_time=columns["end_time"][n],
        return_=columns["return"][n] if columns["return"][n] is not None else float("nan"),
        length=columns["length"][n],
        attributes=attributes,
        steps=steps,
        final_observation=columns["final_observation"][n],
        missing_steps=list(columns["missing_steps"][n] or []),
        scores=dict(scores),
    )


def _concat(tables: list[Any]) -> Any:
    pa = load_pyarrow()
    try:
        return pa.concat_tables(tables)
    except pa.ArrowInvalid as exc:
        raise ValueError(
            "the part files have different schemas (the values changed type during the run; "
            "read the parts one by one)"
        ) from exc

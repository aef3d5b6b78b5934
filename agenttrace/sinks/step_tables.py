"""Step tables: one Parquet row per step and one per episode, typed for training.

Two tables joined by ``episode_id``, each a folder of part files (docs/step-tables.md)::

    <folder>/steps/steps-00000.parquet               one row per step
    <folder>/episode_table/episodes-00000.parquet    one row per episode

Observations and actions get real column types, inferred from the values: a numpy array of
fixed shape becomes nested fixed-size lists of its dtype (``float32[4]``, ``uint8[84][84]``)
with dtype and shape also in the field's metadata; numbers, booleans and strings become
columns of their type; a dict of those becomes a struct. Whatever is irregular (shapes that
change, mixed types, chat messages) is one documented encoded column: the codec's JSON text,
which :func:`agenttrace.trajectory.codec.loads` turns back into the value. ``info`` is always
encoded (its keys change from step to step). Each part has one schema: an episode whose
values need another one starts a new part.

A view of the trajectory the one assembler built, like every sink; the live pipeline writes it
as episodes finish (``sinks=["steps"]``) and ``agenttrace export --format steps`` from stored
spans (into a :class:`StepTablesFolder`, whole or not at all).
:mod:`agenttrace.reading.step_tables` reads the columns back as the values that were written.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agenttrace import semconv as sc
from agenttrace._version import install_hint
from agenttrace.sinks.files import utf8_safe
from agenttrace.sinks.parts import PartWriter
from agenttrace.sinks.scores import score_batch
from agenttrace.trajectory.codec import dumps, encode
from agenttrace.trajectory.model import Trajectory, content_json
from agenttrace.trajectory.scores import Score

logger = logging.getLogger("agenttrace")

STEPS_FOLDER = "steps"
SCORES_FOLDER = "scores"  # scores that came after their episode's row
EPISODES_FOLDER = "episode_table"  # (not "episodes": the JSON-per-episode sink's folder)
#: Field metadata: how a column holds its values, and for arrays the numpy dtype and shape.
ENCODING_KEY = b"agenttrace.encoding"
DTYPE_KEY = b"agenttrace.dtype"
SHAPE_KEY = b"agenttrace.shape"
CONTAINER_KEY = b"agenttrace.container"  # b"tuple": a struct whose rows are tuples
TYPED, ENCODED = b"typed", b"json"
#: Step rows per row group (also bounded by bytes), and per part file.
ROW_GROUP_ROWS = 65_536
ROW_GROUP_BYTES = 64 * 1024 * 1024
ROWS_PER_FILE = 1_000_000
#: The step columns whose type is inferred from the values.
INFERRED = ("observation", "action")
_INT64 = (-(2**63), 2**63 - 1)


def load_pyarrow() -> Any:
    """pyarrow, or an ImportError that says how to install it."""
    try:
        import pyarrow as pa
    except ImportError as exc:
        raise ImportError("step tables need pyarrow: " + install_hint("parquet")) from exc
    return pa


# --- column types, inferred from values ---------------------------------------------------------


class _Encoded:
    """The fallback: codec JSON text (a string column)."""

    def arrow_type(self) -> Any:
        return load_pyarrow().string()

    def metadata(self) -> dict[bytes, bytes]:
        return {ENCODING_KEY: ENCODED}

    def array(self, values: Sequence[Any]) -> Any:
        texts = [None if v is None else utf8_safe(dumps(v)) for v in values]
        return load_pyarrow().array(texts, type=self.arrow_type())

    def __eq__(self, other: object) -> bool:
        return type(other) is _Encoded

    def __hash__(self) -> int:
        return hash(_Encoded)


class _Scalar:
    """Python numbers, booleans or strings of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # bool | int64 | float64 | string

    def arrow_type(self) -> Any:
        pa = load_pyarrow()
        return {"bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64()}.get(
            self.kind, pa.string()
        )

    def metadata(self) -> dict[bytes, bytes]:
        return {ENCODING_KEY: TYPED}

    def array(self, values: Sequence[Any]) -> Any:
        return load_pyarrow().array(list(values), type=self.arrow_type())

    def __eq__(self, other: object) -> bool:
        return type(other) is _Scalar and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(("scalar", self.kind))


class _Array:
    """numpy arrays (or numpy scalars: shape ``()``) of one dtype and one shape."""

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.dtype = dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype
        self.shape = shape

    def arrow_type(self) -> Any:
        pa = load_pyarrow()
        arrow = pa.from_numpy_dtype(self.dtype)
        for size in reversed(self.shape):
            arrow = pa.list_(arrow, size)
        return arrow

    def metadata(self) -> dict[bytes, bytes]:
        return {
            ENCODING_KEY: TYPED,
            DTYPE_KEY: self.dtype.str.encode(),
            SHAPE_KEY: json.dumps(list(self.shape)).encode(),
        }

    def array(self, values: Sequence[Any]) -> Any:
        pa = load_pyarrow()
        count = len(values)
        size = math.prod(self.shape)
        flat = np.zeros((count, size), dtype=self.dtype)
        missing = np.zeros(count, dtype=bool)
        for row, value in enumerate(values):
            if value is None:
                missing[row] = True
            else:
                flat[row] = np.asarray(value, dtype=self.dtype).reshape(-1)
        mask = pa.array(missing) if missing.any() else None
        if not self.shape:
            return pa.array(flat.reshape(-1), type=self.arrow_type(), mask=missing)
        inner = pa.array(flat.reshape(-1), type=pa.from_numpy_dtype(self.dtype))
        for depth, dim in enumerate(reversed(self.shape)):
            outermost = depth == len(self.shape) - 1
            inner = pa.FixedSizeListArray.from_arrays(inner, dim, mask=mask if outermost else None)
        return inner

    def __eq__(self, other: object) -> bool:
        return type(other) is _Array and (other.dtype, other.shape) == (self.dtype, self.shape)

    def __hash__(self) -> int:
        return hash((self.dtype.str, self.shape))


class _Struct:
    """Dicts with the same string keys: one child column per key."""

    def __init__(self, children: dict[str, Any]) -> None:
        self.children = children

    def _child(self, value: Any, key: str) -> Any:
        return value.get(key)

    def arrow_type(self) -> Any:
        pa = load_pyarrow()
        return pa.struct(
            [
                pa.field(key, child.arrow_type(), metadata=child.metadata())
                for key, child in self.children.items()
            ]
        )

    def metadata(self) -> dict[bytes, bytes]:
        return {ENCODING_KEY: TYPED}

    def array(self, values: Sequence[Any]) -> Any:
        pa = load_pyarrow()
        missing = [value is None for value in values]
        columns = [
            child.array([None if value is None else self._child(value, key) for value in values])
            for key, child in self.children.items()
        ]
        fields = list(self.arrow_type())
        return pa.StructArray.from_arrays(
            columns, fields=fields, mask=pa.array(missing) if any(missing) else None
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.children == self.children

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(self.children)))


class _Tuple(_Struct):
    """Tuples of one length (``Tuple`` spaces): a struct with one child per position, named
    ``"0"``, ``"1"``, ...; field metadata ``agenttrace.container = tuple`` says to read each
    row back as a tuple."""

    def _child(self, value: Any, key: str) -> Any:
        return value[int(key)]

    def metadata(self) -> dict[bytes, bytes]:
        return {ENCODING_KEY: TYPED, CONTAINER_KEY: b"tuple"}


_ARRAY_KINDS = "biuf"


def infer_column(values: Sequence[Any]) -> Any:
    """The column type that holds every value exactly (None: a null), else the encoded one.

    All values None gives None: the column can take any type (see :func:`_keep`).
    """
    present = [value for value in values if value is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, (np.ndarray, np.generic)):
        dtype, shape = first.dtype, np.shape(first)
        if (
            dtype.kind in _ARRAY_KINDS
            and not (dtype.kind == "f" and dtype.itemsize < 4)  # float16: not every reader
            and 0 not in shape
            and all(
                isinstance(v, (np.ndarray, np.generic)) and v.dtype == dtype and v.shape == shape
                for v in present
            )
        ):
            return _Array(dtype, shape)
        return _Encoded()
    kind = type(first)
    if kind is bool and all(type(v) is bool for v in present):
        return _Scalar("bool")
    if kind is int and all(type(v) is int and _INT64[0] <= v <= _INT64[1] for v in present):
        return _Scalar("int64")
    if kind is float and all(type(v) is float for v in present):
        return _Scalar("float64")
    if kind is str and all(type(v) is str for v in present):
        return _Scalar("string")
    if kind is tuple and first and all(type(v) is tuple and len(v) == len(first) for v in present):
        positions = {}
        for position in range(len(first)):
            child = infer_column([v[position] for v in present])
            positions[str(position)] = _Encoded() if child is None else child
        return _Tuple(positions)
    if kind is dict and first and all(isinstance(key, str) for key in first):
        keys = list(first)
        if all(type(v) is dict and list(v) == keys for v in present):
            children = {}
            for key in keys:
                child = infer_column([v[key] for v in present])
                children[key] = _Encoded() if child is None else child
            return _Struct(children)
    return _Encoded()


def _keep(current: Any, found: Any) -> Any:
    """The column type for the next episode: the part's own when the episode's values fit it
    (all missing fits any type), else what the episode needs."""
    if found is None:
        return current if current is not None else _Encoded()
    return found


# --- rows ------------------------------------------------------------------------------------


def step_schema(columns: dict[str, Any]) -> Any:
    """The steps table's Arrow schema, for the inferred observation/action column types."""
    pa = load_pyarrow()
    encoded = _Encoded()
    fields = [
        pa.field("episode_id", pa.string()),
        pa.field("index", pa.int64()),
        *(
            pa.field(name, columns[name].arrow_type(), metadata=columns[name].metadata())
            for name in INFERRED
        ),
        pa.field("reward", pa.float64()),
        pa.field("terminated", pa.bool_()),
        pa.field("truncated", pa.bool_()),
        pa.field("discount", pa.float64()),
        pa.field("info", pa.string(), metadata=encoded.metadata()),
        pa.field("start_time", pa.int64()),
        pa.field("end_time", pa.int64()),
        pa.field("error", pa.string()),
    ]
    return pa.schema(fields)


def episode_schema(observation: Any = None) -> Any:
    """The episodes table's Arrow schema; ``final_observation`` has the steps table's
    ``observation`` column type (None: the encoded column)."""
    pa = load_pyarrow()
    json_text = {ENCODING_KEY: ENCODED}
    final = _Encoded() if observation is None else observation
    return pa.schema(
        [
            pa.field("episode_id", pa.string()),
            pa.field("trace_id", pa.string()),
            pa.field("task_id", pa.string()),
            pa.field("group_id", pa.string()),
            pa.field("env_name", pa.string()),
            pa.field("env_index", pa.int64()),
            pa.field("status", pa.string()),
            pa.field("return", pa.float64()),
            pa.field("length", pa.int64()),
            pa.field("steps", pa.int64()),
            pa.field("start_time", pa.int64()),
            pa.field("end_time", pa.int64()),
            pa.field("error_type", pa.string()),
            pa.field("error_message", pa.string()),
            pa.field("attributes", pa.string(), metadata=json_text),
            pa.field("final_observation", final.arrow_type(), metadata=final.metadata()),
            pa.field("missing_steps", pa.list_(pa.int64())),
            pa.field("scores", pa.map_(pa.string(), pa.float64())),
        ]
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def steps_batch(trajectory: Trajectory, columns: dict[str, Any]) -> Any:
    """The episode's step rows, with ``columns`` giving the observation/action types."""
    pa = load_pyarrow()
    steps = trajectory.steps
    schema = step_schema(columns)
    data = {
        "episode_id": [trajectory.episode_id] * len(steps),
        "index": [s.index for s in steps],
        "reward": [_number(s.reward) for s in steps],
        "terminated": [bool(s.terminated) for s in steps],
        "truncated": [bool(s.truncated) for s in steps],
        "discount": [_number(s.discount) for s in steps],
        "info": [_text_or_null(content_json(s, "info")) for s in steps],
        "start_time": [s.start_time for s in steps],
        "end_time": [s.end_time for s in steps],
        "error": [s.error for s in steps],
    }
    arrays = []
    for field in schema:
        if field.name in INFERRED:
            column = columns[field.name]
            if isinstance(column, _Encoded):  # the text as stored, never decoded
                texts = [_text_or_null(content_json(s, field.name)) for s in steps]
                arrays.append(pa.array(texts, pa.string()))
            else:
                arrays.append(column.array([getattr(s, field.name) for s in steps]))
        else:
            arrays.append(pa.array(data[field.name], type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def episode_batch(trajectory: Trajectory, observation: Any = None) -> Any:
    """The episode's row of the episodes table; ``final_observation`` in the column type
    ``observation`` (the steps table's; None: encoded)."""
    pa = load_pyarrow()
    attributes = trajectory.attributes
    env_index = attributes.get(sc.ENV_INDEX)
    error = trajectory.error
    group = attributes.get(sc.GROUP_ID)
    row = {
        "episode_id": trajectory.episode_id,
        "trace_id": trajectory.trace_id,
        "task_id": trajectory.task_id,
        "group_id": None if group is None else str(group),
        "env_name": _text_or_none(attributes.get(sc.ENV_NAME)),
        "env_index": env_index if type(env_index) is int else None,
        "status": trajectory.status,
        "return": _number(trajectory.return_),
        "length": trajectory.length,
        "steps": len(trajectory.steps),
        "start_time": trajectory.start_time,
        "end_time": trajectory.end_time,
        "error_type": None if error is None else error.type,
        "error_message": None if error is None else error.message,
        "attributes": utf8_safe(json.dumps(encode(attributes), ensure_ascii=False)),
        "missing_steps": [int(index) for index in trajectory.missing_steps],
        "scores": list(trajectory.scores.items()),
    }
    schema = episode_schema(observation)
    arrays = []
    for field in schema:
        if field.name != "final_observation":
            arrays.append(pa.array([row[field.name]], type=field.type))
        elif observation is None or isinstance(observation, _Encoded):  # (text as stored)
            text = _text_or_null(content_json(trajectory, "final_observation"))
            arrays.append(pa.array([text], pa.string()))
        else:
            arrays.append(observation.array([trajectory.final_observation]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _text_or_null(text: str) -> str | None:
    """Encoded JSON text for a column; a missing value (``null``) is a null, not text."""
    return None if text == "null" else utf8_safe(text)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# --- the sink --------------------------------------------------------------------------------


class StepTablesSink:
    """Writes the steps and episodes tables under ``folder`` as episodes finish.

    ``flush()`` and ``close()`` finish the parts in progress (readable files); a part also
    finishes after ``rows_per_file`` rows, and when an episode's values need another schema.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        rows_per_file: int = ROWS_PER_FILE,
        row_group_rows: int = ROW_GROUP_ROWS,
        compression: str = "zstd",
    ) -> None:
        self._pa = load_pyarrow()
        self.folder = Path(folder)

        def table(name: str, basename: str, group_rows: int) -> PartWriter:
            return PartWriter(
                self.folder / name,
                basename=basename,
                rows_per_file=rows_per_file,
                row_group_rows=group_rows,
                row_group_bytes=ROW_GROUP_BYTES,
                compression=compression,
            )

        self._steps = table(STEPS_FOLDER, "steps", row_group_rows)
        self._episodes = table(EPISODES_FOLDER, "episodes", max(1, row_group_rows // 64))
        self._scores = table(SCORES_FOLDER, "scores", row_group_rows)
        self._columns: dict[str, Any] = {name: None for name in INFERRED}
        self._closed = False

    @property
    def table_paths(self) -> list[Path]:
        """The finished part files of the tables, oldest first (not ``paths``: they are not
        trajectory files, which ``load_trajectories`` reads)."""
        return [*self._steps.paths, *self._episodes.paths, *self._scores.paths]

    def write(self, trajectory: Trajectory) -> None:
        """Add the episode's step rows and its episode row (both, or neither)."""
        if self._closed:
            raise RuntimeError(f"StepTablesSink({str(self.folder)!r}) is closed; cannot write")
        columns = {}
        for name in INFERRED:
            values = [getattr(s, name) for s in trajectory.steps]
            if name == "observation":  # (the episodes table's final_observation: same type)
                values.append(trajectory.final_observation)
            columns[name] = _keep(self._columns[name], infer_column(values))
        try:
            steps = steps_batch(trajectory, columns)
            episode = episode_batch(trajectory, columns["observation"])
        except (self._pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"episode {trajectory.episode_id!r} cannot be stored in the step tables: {exc}"
            ) from exc
        for name in INFERRED:
            before = self._columns[name]
            if before is not None and columns[name] != before:
                logger.warning(
                    "agenttrace: step tables: episode %s needs another type for column %r "
                    "(%s, was %s); a new part file starts with it",
                    trajectory.episode_id,
                    name,
                    columns[name].arrow_type(),
                    before.arrow_type(),
                )
        self._columns = columns
        self._steps.add(steps)
        self._episodes.add(episode)

    def write_score(self, score: Score) -> None:
        """A score that came after its episode's row: a row of the scores table."""
        self._scores.add(score_batch(score))

    def flush(self) -> None:
        """Finish the parts in progress so they are complete, readable files."""
        self._steps.finish()
        self._episodes.finish()
        self._scores.finish()

    def close(self) -> None:
        """Finish the parts in progress; later writes raise."""
        if not self._closed:
            self._closed = True
            self.flush()

    def __repr__(self) -> str:
        return f"StepTablesSink({str(self.folder)!r})"


class StepTablesFolder:
    """The step tables of ``agenttrace export --format steps --out FOLDER``, whole or not at
    all: written into ``.FOLDER.partial`` beside it and renamed into place by :meth:`close`.

    A folder already at the target (``--force``) is replaced only if it holds step tables
    and nothing else, so a mistyped path never costs unrelated files.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = check_target(path)
        self.partial = self.path.with_name(f".{self.path.name}.partial")
        if self.partial.exists():
            shutil.rmtree(self.partial)
        self.rows = 0
        self._sink = StepTablesSink(self.partial)

    def write(self, trajectory: Trajectory) -> None:
        self._sink.write(trajectory)
        self.rows += len(trajectory.steps)

    def write_score(self, score: Score) -> None:
        self._sink.write_score(score)

    def close(self) -> Path:
        """Finish the tables and move the folder into place; returns its path."""
        self._sink.close()
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old")
            os.replace(self.path, old)
            os.replace(self.partial, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.partial, self.path)
        return self.path

    def discard(self) -> None:
        """Stop without a result: the partial folder is removed."""
        try:
            self._sink.close()
        finally:
            shutil.rmtree(self.partial, ignore_errors=True)


def check_target(path: str | os.PathLike) -> Path:
    """The folder step tables may be exported to; ValueError says why one may not."""
    folder = Path(path)
    if folder.name.lower().endswith((".jsonl", ".gz", ".parquet", ".ndjson")):
        raise ValueError(
            "--format steps writes a folder (steps/ and episode_table/), not a file: "
            f"{str(folder)!r}"
        )
    if folder.exists() and not _only_step_tables(folder):
        raise ValueError(
            f"{str(folder)!r} exists and holds more than step tables; choose another folder "
            "(it is never replaced)"
        )
    return folder


def _only_step_tables(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    return all(
        entry.is_dir() and entry.name in (STEPS_FOLDER, EPISODES_FOLDER, SCORES_FOLDER)
        for entry in folder.iterdir()
    )


__all__ = [
    "StepTablesFolder",
    "StepTablesSink",
    "episode_batch",
    "infer_column",
    "steps_batch",
]

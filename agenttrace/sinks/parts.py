"""Parquet part files, written so that readers never see half of one.

Rows go out in bounded row groups; a part is written under a ``.partial`` name and renamed to
``<basename>-NNNNN.parquet`` only when it is complete (``finish()``, or after ``rows_per_file``
rows), so a crash loses at most the rows of the part in progress. Numbering continues after
the parts already in the folder, so a rerun never overwrites. The trajectory Parquet sink and
the step tables (one folder per table) both write through it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agenttrace.sinks.jsonl import check_basename

_PART = re.compile(r"-(\d{5,})\.parquet(?:\.partial)?")


class PartWriter:
    """Appends Arrow batches to ``folder/<basename>-00000.parquet``, ``-00001``, ...

    A batch whose schema differs from the part in progress finishes that part first: each
    part has one schema (the step tables infer theirs from the data).
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        basename: str,
        rows_per_file: int,
        row_group_rows: int,
        row_group_bytes: int,
        compression: str = "zstd",
    ) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa, self._pq = pa, pq
        if rows_per_file <= 0:
            raise ValueError(f"rows_per_file must be positive, got {rows_per_file}")
        self.folder = Path(folder)
        self.basename = check_basename(basename)
        self.rows_per_file = int(rows_per_file)
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.compression = compression
        self._next_index: int | None = None  # (the folder is made, and read, at first write)
        self._schema: Any = None  # of the part in progress (and of the pending batches)
        self._writer: Any = None
        self._partial: Path | None = None
        self._final: Path | None = None
        self._rows_in_part = 0
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self.paths: list[Path] = []  # finished parts, oldest first

    def _first_free_index(self) -> int:
        prefix = self.basename
        used = [
            int(match.group(1))
            for entry in self.folder.iterdir()
            if entry.name.startswith(prefix)
            and (match := _PART.fullmatch(entry.name[len(prefix) :]))
        ]
        return max(used, default=-1) + 1

    def add(self, batch: Any) -> None:
        """Buffer ``batch``; a row group goes out when the buffer is full, and the part is
        finished after ``rows_per_file`` rows."""
        if self._schema is not None and not batch.schema.equals(self._schema):
            self.finish()
        if self._schema is None:
            self._schema = batch.schema
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        self._rows_in_part += batch.num_rows
        if self._rows_in_part >= self.rows_per_file:
            self.finish()
        elif (
            self._pending_rows >= self.row_group_rows or self._pending_bytes >= self.row_group_bytes
        ):
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        table = self._pa.Table.from_batches(self._pending, schema=self._schema)
        if self._writer is None:
            if self._next_index is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._next_index = self._first_free_index()
            index = self._next_index
            self._next_index += 1
            self._final = self.folder / f"{self.basename}-{index:05d}.parquet"
            self._partial = self._final.with_name(self._final.name + ".partial")
            self._writer = self._pq.ParquetWriter(
                self._partial, self._schema, compression=self.compression
            )
        self._writer.write_table(table.combine_chunks(), row_group_size=max(1, table.num_rows))
        self._pending = []
        self._pending_rows = 0
        self._pending_bytes = 0

    def finish(self) -> None:
        """Finish the part in progress (a complete, readable file); the next batch starts a
        new one."""
        try:
            self._write_pending()
        finally:
            self._rows_in_part = 0
            self._pending = []
            self._pending_rows = 0
            self._pending_bytes = 0
            self._schema = None
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.close()
                assert self._partial is not None and self._final is not None
                _fsync_path(self._partial)
                os.replace(self._partial, self._final)
                self.paths.append(self._final)


def _fsync_path(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())

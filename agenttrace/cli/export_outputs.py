"""Where and how ``agenttrace export`` writes: one file (JSON lines or Parquet), a folder of
step tables or a Minari dataset, in each format (trajectories, chat rows, token rows, steps),
and the scores that came after their episode. :mod:`agenttrace.cli.export` runs the export.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace.sinks.minari_dataset import MinariDatasetError as DatasetError
from agenttrace.sinks.minari_dataset import why_not_minari
from agenttrace.sinks.single_file import SingleFileWriter
from agenttrace.sinks.step_tables import StepTablesFolder
from agenttrace.storage.errors import SpanDecodeError, SpanFormatError
from agenttrace.trajectory.chat import chat_rows
from agenttrace.trajectory.codec import encode
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.records import SpanRecord
from agenttrace.trajectory.scores import score_from_record
from agenttrace.trajectory.tokens import token_rows, token_rows_to_batch, tokens_arrow_schema

#: Bad records (and other errors) quoted in the summary; all are counted.
SHOWN_ERRORS = 5


@dataclass
class ExportReport:
    """What an export did, for the closing summary (and tests)."""

    source: str = ""
    spans: int = 0
    bad_records: int = 0
    first_errors: list[str] = field(default_factory=list)
    #: Lines and values that could not be decoded (SpanDecodeError): left out, exit 3.
    undecodable: int = 0
    first_undecodable: list[str] = field(default_factory=list)
    written: Counter = field(default_factory=Counter)  # status -> episodes written
    rows: int = 0
    lossy: int = 0
    filtered: Counter = field(default_factory=Counter)  # reason -> episodes left out
    without_llm_calls: int = 0  # chat format: episodes that gave no rows
    unwritable: int = 0  # episodes the output format could not hold (the others go on)
    first_unwritable: list[str] = field(default_factory=list)
    parts: Counter = field(default_factory=Counter)  # --split: part -> episodes
    late_scores: Counter = field(default_factory=Counter)  # kept (True) / no place (False)
    #: --format tokens, a row per episode: rows -> episodes (more than one: continuity broke)
    rows_per_episode: Counter = field(default_factory=Counter)
    counts: Any = None  # AssemblyCounts
    seconds: float = 0.0

    def add(self, other: ExportReport) -> None:
        """Count in what another part of the same export did (a bucket of the Ray engine);
        its first errors after ours, as many as are shown."""
        added = ("bad_records", "undecodable", "unwritable", "rows", "lossy", "without_llm_calls")
        for name in added:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in (
            (self.first_errors, other.first_errors),
            (self.first_undecodable, other.first_undecodable),
            (self.first_unwritable, other.first_unwritable),
        ):
            mine.extend(theirs[: SHOWN_ERRORS - len(mine)])
        for counter in ("written", "filtered", "parts", "late_scores", "rows_per_episode"):
            getattr(self, counter).update(getattr(other, counter))
        if other.counts is not None:
            if self.counts is None:
                self.counts = type(other.counts)()
            for name in vars(other.counts):
                setattr(self.counts, name, getattr(self.counts, name) + getattr(other.counts, name))

    def bad(self, error: SpanFormatError) -> None:
        if isinstance(error, SpanDecodeError):
            self.undecodable += 1
            if len(self.first_undecodable) < SHOWN_ERRORS:
                self.first_undecodable.append(str(error))
            return
        self.bad_records += 1
        if len(self.first_errors) < SHOWN_ERRORS:
            self.first_errors.append(str(error))


def write_late_scores(
    records: list[SpanRecord], writers: Iterable[Any], report: ExportReport
) -> None:
    """Scores whose episode was written before them, or is not in the input: score records
    beside the output, which loaders merge (a Minari dataset has no place for them)."""
    for record in records:
        try:
            score = score_from_record(record)
        except ValueError as exc:
            report.bad_records += 1
            if len(report.first_errors) < SHOWN_ERRORS:
                report.first_errors.append(f"score span: {exc}")
            continue
        kept = False
        for writer in writers:
            write_score = getattr(writer, "write_score", None)
            if write_score is not None:
                write_score(score)
                kept = True
        report.late_scores[kept] += 1


def open_output(args: argparse.Namespace, kind: str, target: Path, dataset_id: str | None) -> Any:
    """Where the export writes: a folder of step tables, a Minari dataset, or one file."""
    if kind == "steps":
        return StepTablesFolder(target)
    if kind == "minari":
        from agenttrace.sinks.minari_dataset import MinariExport

        return MinariExport(dataset_id or "", root=args.out, env=args.env, force=args.force)
    schema = _schema(args.format, args.tokens_per) if kind == "parquet" else None
    return SingleFileWriter(target, schema=schema)


def _schema(fmt: str, per: str = "episode") -> Any:
    from agenttrace.sinks.parquet import arrow_schema, chat_arrow_schema

    if fmt == "tokens":
        return tokens_arrow_schema(per)
    return chat_arrow_schema() if fmt == "chat" else arrow_schema()


def emitter(fmt: str, kind: str, writer: Any, report: ExportReport, per: str = "episode") -> Any:
    """The function that writes one kept trajectory in the chosen format."""
    if fmt == "tokens":
        schema = tokens_arrow_schema(per) if kind == "parquet" else None
        encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

        def emit_tokens(trajectory: Trajectory) -> None:
            rows = token_rows(trajectory, per)
            if not rows:
                report.without_llm_calls += 1
                return
            report.written[trajectory.status] += 1
            if schema is not None:
                writer.write_batch(token_rows_to_batch(rows, schema))
            else:
                for row in rows:
                    writer.write_line(encoder.encode(row))
            report.rows += len(rows)
            if per == "episode":
                report.rows_per_episode[len(rows)] += 1

        return emit_tokens
    if fmt in ("steps", "minari"):

        def emit_steps(trajectory: Trajectory) -> None:
            skipped = getattr(writer, "skipped", 0)
            try:
                writer.write(trajectory)
            except DatasetError:  # the whole output cannot be written (Minari's spaces)
                raise
            except ValueError as exc:  # this episode's values only: the others go on
                report.unwritable += 1
                if len(report.first_unwritable) < SHOWN_ERRORS:
                    report.first_unwritable.append(str(exc))
                return
            if getattr(writer, "skipped", 0) > skipped:  # (no Minari episode: no steps...)
                report.unwritable += 1
                if len(report.first_unwritable) < SHOWN_ERRORS:
                    why = why_not_minari(trajectory) or "not a Minari episode"
                    report.first_unwritable.append(f"episode {trajectory.episode_id}: {why}")
                return
            report.written[trajectory.status] += 1
            report.lossy += bool(trajectory.lossy)
            report.rows += len(trajectory.steps)

        return emit_steps
    if kind == "parquet":
        from agenttrace.sinks.parquet import (
            arrow_schema,
            chat_arrow_schema,
            chat_rows_to_batch,
            trajectory_to_batch,
        )

        schema = chat_arrow_schema() if fmt == "chat" else arrow_schema()
    dump = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

    def emit(trajectory: Trajectory) -> None:
        report.written[trajectory.status] += 1
        if trajectory.lossy:
            report.lossy += 1
        if fmt == "trajectory":
            if kind == "parquet":
                writer.write_batch(trajectory_to_batch(trajectory, schema))
            else:
                writer.write_trajectory(trajectory)
            report.rows += 1
            return
        rows = chat_rows(trajectory)
        if not rows:
            report.without_llm_calls += 1
            return
        if kind == "parquet":
            writer.write_batch(chat_rows_to_batch(rows, schema))
        else:
            for row in rows:
                writer.write_line(dump(encode(row)))
        report.rows += len(rows)

    return emit

"""``agenttrace score --from FILE``: record scores given after the episodes (a grader's CSV, a
labelling tool's JSON lines) as ``score`` spans, exactly as :func:`agenttrace.score` does.

Each row needs ``episode_id`` and ``value``; ``name`` (default ``reward``), ``step`` and
``comment`` are optional. CSV needs a header row; JSON lines are objects with those keys (score
records from a ``scores.jsonl`` work as they are). A bad row is reported with its line number
and skipped; the others are recorded. Where the spans and score records go is the usual
configuration (``AGENTTRACE_OUT``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ...).
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

import agenttrace as at
from agenttrace.cli.exits import EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, count
from agenttrace.trajectory.scores import REWARD, checked_score

SHOWN_ERRORS = 5
#: ``agenttrace score --help`` (plain text: help shows no markup).
DESCRIPTION = (
    "Record scores given after the episodes (a grader's CSV, a labelling tool's JSON lines) "
    "as 'score' spans, exactly as agenttrace.score() does. Each row needs episode_id and "
    "value; name (default: reward), step and comment are optional. A bad row is named on "
    "stderr and skipped; the others are recorded. Where the spans and score records go is "
    "the usual configuration (AGENTTRACE_OUT, OTEL_EXPORTER_OTLP_ENDPOINT, ...)."
)
EPILOG = (
    "Exit status: 0 every row recorded; 1 the file does not exist or cannot be read, or no "
    "row was recorded; 2 bad arguments; 3 partial: some rows were not scores (each named), "
    "the others recorded."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "score",
        help="record late scores (verifier, judge, human) from a CSV or JSON-lines file",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="FILE",
        help="*.csv (with a header: episode_id,value[,name,step,comment]) or *.jsonl",
    )
    parser.add_argument(
        "--name", default=REWARD, help="score name for rows that give none (default: reward)"
    )
    return parser


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a CSV or JSON-lines file; a row that is not an object is given
    as ``{"$error": why}``."""
    with open(path, encoding="utf-8", newline="") as handle:
        if path.suffix.lower() == ".csv":
            reader = csv.DictReader(handle)
            for row in reader:
                yield reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}
            return
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                yield number, {"$error": f"not JSON: {exc}"}
                continue
            yield number, data if isinstance(data, dict) else {"$error": "not a JSON object"}


def _step(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    path = Path(args.source)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        err.print(f"agenttrace score: error: {path} {what}")
        return EXIT_FAILURE
    recorded, bad, errors = 0, 0, []
    runtime = at.configure()  # (from AGENTTRACE_* and OTEL_* as any traced program)
    try:
        for number, row in _rows(path):
            try:
                if "$error" in row:
                    raise ValueError(row["$error"])
                score = checked_score(
                    row.get("episode_id"),
                    row.get("value"),
                    row.get("name", args.name),
                    _step(row.get("step")),
                    row.get("comment"),
                )
            except ValueError as exc:
                bad += 1
                if len(errors) < SHOWN_ERRORS:
                    errors.append(f"{path}:{number}: {exc}")
                continue
            at.score(
                score.episode_id,
                score.value,
                name=score.name,
                step=score.step,
                comment=score.comment,
            )
            recorded += 1
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        err.print(f"agenttrace score: error: cannot read {path}: {exc}")
        return EXIT_FAILURE
    finally:
        runtime.shutdown()  # (the scores are sent and written before the numbers are printed)
    for line in errors:
        err.print(f"agenttrace score: {line}")
    if bad > len(errors):
        err.print(f"agenttrace score: ... {count(bad - len(errors), 'more bad row')}")
    if not recorded:
        err.print(f"agenttrace score: error: no score recorded from {path}")
        return EXIT_FAILURE
    skipped = f", {count(bad, 'bad row')} skipped" if bad else ""
    out.print(f"agenttrace score: {count(recorded, 'score')} recorded from {path}{skipped}")
    return EXIT_PARTIAL if bad else EXIT_OK

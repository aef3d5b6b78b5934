"""A torn last line (a writer died mid-write) is cut before anyone appends to the file: it is
never left in the middle of a file, every complete line is kept, and the readers then have
nothing to report."""

from __future__ import annotations

import logging

import pytest
from conftest_sinks_helpers import ErrorLog, make_batch, make_trajectory

import agenttrace as at
from agenttrace.sinks import JsonlSink, load_trajectories
from agenttrace.sinks.jsonl import complete_size
from agenttrace.storage import OtlpJsonLinesWriter, encode_lines, read_otlp_json
from agenttrace.trajectory.records import SpanRecord


def span_line(i: int, name: str) -> str:
    return encode_lines([SpanRecord(1, i, 0, name, 1, 2, {})]) + "\n"


@pytest.mark.parametrize("torn_size", [1, 100, 200_000])  # the last is longer than a scan block
def test_jsonl_sink_cuts_a_torn_line_before_appending(tmp_path, caplog, torn_size) -> None:
    batch = make_batch(4)
    path = tmp_path / "trajectories.jsonl"
    complete = "".join(t.to_json() + "\n" for t in batch[:2]).encode()
    torn = (batch[2].to_json().encode() + b" " * torn_size)[:torn_size]
    path.write_bytes(complete + torn)
    assert complete_size(path) == len(complete)

    sink = JsonlSink(tmp_path)
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        sink.write(batch[3])
        sink.close()
    assert f"ended with a torn line of {torn_size} byte(s)" in caplog.text
    assert (sink.torn_lines_cut, sink.torn_bytes_cut) == (1, torn_size)
    assert path.read_bytes() == complete + (batch[3].to_json() + "\n").encode()
    errors = ErrorLog()
    assert load_trajectories(path, on_error=errors) == [*batch[:2], batch[3]]
    assert errors.errors == []


def test_jsonl_sink_a_file_that_is_all_torn_line_is_emptied(tmp_path) -> None:
    (tmp_path / "trajectories.jsonl").write_bytes(b'{"schema":"agenttr')
    sink = JsonlSink(tmp_path)
    batch = make_batch(1)
    sink.write(batch[0])
    sink.close()
    assert load_trajectories(tmp_path, on_error=ErrorLog()) == batch
    assert sink.torn_bytes_cut == len(b'{"schema":"agenttr')


def test_jsonl_sink_leaves_complete_files_alone(tmp_path) -> None:
    batch = make_batch(2)
    first = JsonlSink(tmp_path)
    first.write(batch[0])
    first.close()
    second = JsonlSink(tmp_path)
    second.resume()  # opens the file now: nothing to cut
    second.write(batch[1])
    second.close()
    assert (second.torn_lines_cut, second.torn_bytes_cut) == (0, 0)
    assert load_trajectories(tmp_path) == batch


def test_jsonl_sink_resume_cuts_at_once(tmp_path) -> None:
    batch = make_batch(1)
    path = tmp_path / "trajectories.jsonl"
    path.write_text(batch[0].to_json() + "\n" + '{"torn', encoding="utf-8")
    sink = JsonlSink(tmp_path)
    assert sink.position == (0, len(batch[0].to_json().encode()) + 1)  # where its next line goes
    sink.resume()
    assert path.read_text(encoding="utf-8") == batch[0].to_json() + "\n"
    sink.close()


def test_span_writer_cuts_a_torn_line_before_appending(tmp_path, caplog) -> None:
    before = span_line(1, "before") + span_line(2, "also before")
    torn = span_line(3, "torn")[:40]
    (tmp_path / "spans.jsonl").write_text(before)
    (tmp_path / "spans-00002.jsonl").write_text(before + torn)  # the newest file
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        writer = OtlpJsonLinesWriter(tmp_path)
    assert f"spans-00002.jsonl ended with a torn line of {len(torn)} byte(s)" in caplog.text
    assert (writer.torn_lines_cut, writer.torn_bytes_cut) == (1, len(torn))
    assert writer.position == (2, len(before))
    writer.write([SpanRecord(1, 4, 0, "after", 1, 2, {})])
    writer.close()
    assert (tmp_path / "spans-00002.jsonl").read_text() == before + span_line(4, "after")
    problems: list[object] = []
    names = [r.name for r in read_otlp_json(tmp_path, on_error=problems.append)]
    assert names == ["before", "also before"] * 2 + ["after"]
    assert problems == []


def test_span_writer_leaves_complete_files_alone(tmp_path) -> None:
    (tmp_path / "spans.jsonl").write_text(span_line(1, "a"))
    writer = OtlpJsonLinesWriter(tmp_path)
    writer.write([SpanRecord(1, 2, 0, "b", 1, 2, {})])
    writer.close()
    assert writer.torn_lines_cut == 0
    assert (tmp_path / "spans.jsonl").read_text() == span_line(1, "a") + span_line(2, "b")


def test_the_pipeline_reports_a_torn_line_it_cut(tmp_path):
    """A run folder a crash left with a torn last line, continued by a new run of that name."""
    old = make_trajectory(0, steps=1)
    run = tmp_path / "runs" / "again"
    run.mkdir(parents=True)
    whole = old.to_json() + "\n"
    (run / "trajectories.jsonl").write_text(whole + whole[: len(whole) // 2])
    runtime = at.configure(out=str(tmp_path / "runs"), run_name="again", writer="thread")
    with at.episode(task_id="new"):
        pass
    runtime.shutdown()
    stats = runtime.stats()
    assert stats["torn_lines_cut"] == 1
    assert stats["torn_bytes_cut"] == len(whole[: len(whole) // 2].encode())
    errors = []
    loaded = load_trajectories(run / "trajectories.jsonl", on_error=errors.append)
    assert errors == []
    assert [t.task_id for t in loaded] == [old.task_id, "new"]

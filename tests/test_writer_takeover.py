"""Taking over from a helper process that died mid-batch: what it wrote without confirming is
counted written, not written again; the rest is written here, or counted lost when its
records were not kept; a line it tore is cut."""

from __future__ import annotations

import logging
import os
import signal

import pytest

import agenttrace as at
from agenttrace.processing import writer_process
from agenttrace.processing.writer import (
    EpisodeSpans,
    EpisodeWriter,
    FinishedEpisode,
    SinkSpec,
    WriterSpec,
)
from agenttrace.processing.writer_process import RemoteWriter
from agenttrace.sinks import load_trajectories
from agenttrace.storage import read_otlp_json
from agenttrace.trajectory.assembler import build_trajectory

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or len(os.sched_getaffinity(0)) < 2,
    reason="the helper-process writer is the default on POSIX machines with 2+ CPUs",
)

SPANS = 7  # an episode of 3 steps: the episode, 3 timesteps, 3 env steps


@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> list[FinishedEpisode]:
    """Eight finished episodes as the processor hands them to its writer."""
    captured: list[FinishedEpisode] = []
    original = EpisodeWriter.write

    def capture(self: EpisodeWriter, items: list) -> None:
        captured.extend(item for item in items if isinstance(item, FinishedEpisode))

    EpisodeWriter.write = capture  # type: ignore[method-assign]
    try:
        out = tmp_path_factory.mktemp("capture")
        runtime = at.configure(out=str(out), run_name="capture", writer="thread")
        for i in range(8):
            with at.episode(task_id=str(i)):
                for t in range(3):
                    with at.timestep():
                        with at.env_step() as step:
                            step.record(observation=[i, t], reward=1.0, terminated=t == 2)
        runtime.shutdown()
    finally:
        EpisodeWriter.write = original  # type: ignore[method-assign]
    assert [len(e.records) for e in captured] == [SPANS] * 8
    return captured


def spec_for(folder) -> WriterSpec:
    return WriterSpec(
        sinks=(SinkSpec("jsonl", {"folder": str(folder)}),),
        span_file={"path_or_folder": str(folder)},
    )


def trajectory_line(episode: FinishedEpisode) -> bytes:
    return (build_trajectory(episode.records, episode.episode_id).to_json() + "\n").encode()


def stop_helper() -> object:
    helper = writer_process._helper
    assert helper is not None and helper.alive
    helper.process.send_signal(signal.SIGSTOP)  # takes what fits in the pipe, writes nothing
    return helper.process


@pytest.mark.parametrize("keep_records", [True, False])
def test_what_the_helper_wrote_unconfirmed_counts_once(
    tmp_path, episodes, caplog, keep_records
) -> None:
    spec = spec_for(tmp_path)
    writer = RemoteWriter(spec, max_retained_spans=None if keep_records else 0)
    assert writer.in_helper_process
    writer.write(episodes[:2])
    writer.flush()  # confirmed
    process = stop_helper()
    writer.write(episodes[2:6])  # sent, never confirmed
    # As if the helper had written episode 2 and episode 3's span line, then died in the
    # middle of episode 3's trajectory line.
    stand_in = EpisodeWriter.from_spec(spec)
    stand_in.write([episodes[2]])
    assert stand_in.span_writer is not None
    stand_in.span_writer.write(episodes[3].records)
    stand_in.close()
    torn = trajectory_line(episodes[3])[:300]
    with open(tmp_path / "trajectories.jsonl", "ab") as handle:
        handle.write(torn)
    process.kill()  # type: ignore[attr-defined]
    process.wait(10)  # type: ignore[attr-defined]

    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        writer.write(episodes[6:])
        writer.close()
    assert not writer.in_helper_process
    report = writer.report()
    assert f"ended with a torn line of {len(torn)} byte(s)" in caplog.text
    assert report["torn_lines_cut"] == 1

    problems: list[object] = []
    written = load_trajectories(tmp_path / "trajectories.jsonl", on_error=problems.append)
    spans = list(read_otlp_json(tmp_path / "spans.jsonl", on_error=problems.append))
    assert problems == []
    ids = [t.task_id for t in written]
    assert len(ids) == len(set(ids))
    assert len({(r.trace_id, r.span_id) for r in spans}) == len(spans)
    if keep_records:  # 3 (trajectory only), 4 and 5 written here from the kept records
        assert sorted(ids) == [str(i) for i in range(8)]
        assert len(spans) == 8 * SPANS
        lost_episodes = lost_spans = 0
        assert "1 episode(s) were found in its files and 3 item(s) were written again" in (
            caplog.text
        )
    else:  # 3 (whose spans are in the file), 4 and 5 are lost, and counted
        assert sorted(ids) == ["0", "1", "2", "6", "7"]
        assert len(spans) == 6 * SPANS
        lost_episodes, lost_spans = 3, 2 * SPANS
        assert "3 episode(s) and 14 span(s) are counted as lost" in caplog.text
    assert report["episodes_lost_writer_crash"] == lost_episodes
    assert report["spans_lost_writer_crash"] == lost_spans
    assert sum(report["statuses"].values()) == len(written)
    assert report["statuses"] == {"completed": len(written)}
    assert report["spans_written"] == len(spans)


def test_a_span_line_the_helper_tore_is_cut_and_written_again(tmp_path, episodes, caplog) -> None:
    spec = spec_for(tmp_path)
    writer = RemoteWriter(spec)
    writer.write(episodes[:1])
    writer.flush()
    process = stop_helper()
    writer.write(episodes[1:3])
    # As if the helper had died in the middle of episode 1's span line.
    stand_in = EpisodeWriter.from_spec(WriterSpec(span_file={"path_or_folder": str(tmp_path)}))
    assert stand_in.span_writer is not None
    stand_in.span_writer.write(episodes[1].records)
    stand_in.close()
    span_file = tmp_path / "spans.jsonl"
    data = span_file.read_bytes()
    span_file.write_bytes(data[:-500])
    process.kill()  # type: ignore[attr-defined]
    process.wait(10)  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        writer.close()  # the takeover happens here; nothing else is written
    assert "ended with a torn line of" in caplog.text
    problems: list[object] = []
    written = load_trajectories(tmp_path / "trajectories.jsonl", on_error=problems.append)
    spans = list(read_otlp_json(tmp_path / "spans.jsonl", on_error=problems.append))
    assert problems == []
    assert sorted(t.task_id for t in written) == ["0", "1", "2"]
    assert len(spans) == len({(r.trace_id, r.span_id) for r in spans}) == 3 * SPANS
    report = writer.report()
    assert report["episodes_lost_writer_crash"] == report["spans_lost_writer_crash"] == 0
    assert report["spans_written"] == 3 * SPANS


def test_what_is_kept_is_bounded(tmp_path, episodes) -> None:
    writer = RemoteWriter(spec_for(tmp_path), max_retained_spans=2 * SPANS)
    process = stop_helper()
    writer.write(episodes[:5])  # the oldest three are let go: only their ids are kept
    assert writer._retained_spans == 2 * SPANS and writer._let_go == 3
    process.kill()  # type: ignore[attr-defined]
    process.wait(10)  # type: ignore[attr-defined]
    writer.close()
    written = load_trajectories(tmp_path / "trajectories.jsonl")
    assert sorted(t.task_id for t in written) == ["3", "4"]
    report = writer.report()
    assert report["episodes_lost_writer_crash"] == 3
    assert report["spans_lost_writer_crash"] == 3 * SPANS


@pytest.mark.parametrize("span_file", [True, False])
def test_an_open_episode_the_helper_held_goes_on_after_it_dies(
    tmp_path, episodes, caplog, span_file
) -> None:
    """The helper held an open episode's first spans (confirmed) when it died: the stand-in
    reads them back from the span file and writes the episode whole; without a span file
    they are counted lost and the episode comes out incomplete."""
    spec = spec_for(tmp_path)
    if not span_file:
        spec = spec._replace(span_file=None)
    writer = RemoteWriter(spec)
    assert writer.in_helper_process
    episode = episodes[0]
    first, rest = episode.records[:4], episode.records[4:]  # steps 0 and 1, then the rest
    writer.write([EpisodeSpans(episode.episode_id, first)])
    writer.flush()  # confirmed: only the helper holds them now
    process = stop_helper()
    process.kill()  # type: ignore[attr-defined]
    process.wait(10)  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="agenttrace"):
        writer.write([episode._replace(records=rest, streamed=len(first))])
        writer.close()
    assert not writer.in_helper_process
    (trajectory,) = load_trajectories(tmp_path / "trajectories.jsonl")
    report = writer.report()
    if span_file:
        assert trajectory == build_trajectory(episode.records, episode.episode_id)
        assert trajectory.status == "completed" and len(trajectory.steps) == 3
        assert report["spans_lost_writer_crash"] == 0
        spans = list(read_otlp_json(tmp_path / "spans.jsonl"))
        assert len(spans) == SPANS  # each once
    else:
        assert trajectory.status == "incomplete"
        assert trajectory.missing_steps == [0, 1]
        assert report["spans_lost_writer_crash"] == len(first)

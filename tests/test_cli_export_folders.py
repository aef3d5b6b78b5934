"""``agenttrace export --from FOLDER`` reads a folder's span files, and only those.

A run folder holds more than spans: the trajectories the run wrote, and whatever was exported
into it later (chat rows, Parquet, step tables, scores). Reading those as spans warned about
every record and cost memory in proportion to them. Each test makes its folder by running
agenttrace (the demo, the tracing API, the export command itself), then checks that the
records read from the folder are exactly those of its span files, with nothing said about
the rest; and that a trajectories file given by name is refused in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_same_episodes, clean_environ, exported, play_cartpole
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agenttrace as at
from agenttrace.sinks import load_trajectories
from agenttrace.storage import open_source, read_otlp_json
from agenttrace.storage.sources import SourceError
from agenttrace.trajectory.scores import Score

EPISODES = 6
#: The demo's trajectories, as the run wrote them (filled by the run_folder fixture).
LIVE: list[at.Trajectory] = []


def agenttrace(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "agenttrace", *argv],
        cwd=cwd,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A demo run folder, plus what other commands wrote into it: chat rows, trajectories
    as Parquet, step tables, a scores file, and a JSON file of someone else's."""
    out = tmp_path_factory.mktemp("runs")
    done = agenttrace(
        "demo", "-n", str(EPISODES), "--seed", "3", "--out", ".", "--run-name", "r", cwd=out
    )
    assert done.returncode == 0, done.stderr
    run = out / "r"
    spans = str(run / "spans.jsonl")
    for extra in (
        ["--out", str(run / "sft.jsonl"), "--format", "chat"],
        ["--out", str(run / "trajectories.parquet")],
        ["--out", str(run / "tables"), "--format", "steps"],
    ):
        done = agenttrace("export", "--from", spans, "--quiet", *extra, cwd=out)
        assert done.returncode == 0, done.stderr
    LIVE[:] = load_trajectories(run / "trajectories.jsonl")  # (before the scores file)
    score = Score(episode_id=LIVE[0].episode_id, name="judge", value=1.0).to_dict()
    (run / "scores.jsonl").write_text(json.dumps(score) + "\n")
    (run / "notes.json").write_text('{"note": "not spans"}\n')
    return run


def test_a_run_folder_is_read_for_its_span_file_alone(run_folder, tmp_path) -> None:
    spans = run_folder / "spans.jsonl"
    assert {p.name for p in run_folder.iterdir()} >= {
        "spans.jsonl",
        "trajectories.jsonl",
        "trajectories.parquet",
        "sft.jsonl",
        "scores.jsonl",
        "notes.json",
        "tables",
    }
    # The records read from the folder are the span file's, in the API and in --from.
    assert list(read_otlp_json(run_folder)) == list(read_otlp_json(spans))
    assert open_source(str(run_folder)).files == [spans]
    # The command: exit 0, nothing on stderr, the span file's spans and nothing else.
    done = agenttrace("export", "--from", str(run_folder), "--out", "t.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    spans_read = sum(1 for _ in read_otlp_json(spans))
    assert f"from {run_folder} (1 file)" in done.stdout
    assert f"read {spans_read:,} spans in " in done.stdout
    assert f"wrote {EPISODES} episodes to t.jsonl" in done.stdout
    alone = exported(str(spans), tmp_path / "alone.jsonl")
    assert load_trajectories(tmp_path / "t.jsonl") == alone
    assert_same_episodes(LIVE, alone)


@pytest.mark.parametrize("name", ["trajectories.jsonl", "trajectories.parquet"])
def test_a_trajectories_file_given_to_export_says_what_it_is(run_folder, tmp_path, name):
    path = run_folder / name
    done = agenttrace("export", "--from", str(path), "--out", "t.jsonl", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr  # one line
    assert done.stderr.startswith(f"agenttrace export: error: {path} is a trajectories file")
    assert f"agenttrace inspect {path}" in done.stderr and "load_trajectories" in done.stderr
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SourceError, match="is a trajectories file"):
        open_source(str(path))


def test_other_outputs_given_by_name_are_named_too(run_folder, tmp_path) -> None:
    for name, said in (
        ("sft.jsonl", "is an export in chat format"),
        ("scores.jsonl", "is a scores file"),
        ("notes.json", "is JSON without the trajectory schema tag"),
    ):
        done = agenttrace(
            "export", "--from", str(run_folder / name), "--out", "t.jsonl", cwd=tmp_path
        )
        assert done.returncode == 2, name
        assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_a_glob_over_a_run_folder_skips_the_outputs_too(run_folder, tmp_path) -> None:
    done = agenttrace("export", "--from", f"{run_folder}/*", "--out", "t.jsonl", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "(1 file)" in done.stdout
    done = agenttrace(
        "export", "--from", f"{run_folder}/trajectories*", "--out", "t2.jsonl", cwd=tmp_path
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "no span files match" in done.stderr and "2 files that are not spans" in done.stderr


def test_a_folder_without_span_files_says_what_it_holds(run_folder, tmp_path) -> None:
    folder = tmp_path / "only-trajectories"
    folder.mkdir()
    (folder / "trajectories.jsonl").write_bytes((run_folder / "trajectories.jsonl").read_bytes())
    done = agenttrace("export", "--from", str(folder), "--out", "t.jsonl", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "no span files in folder" in done.stderr
    assert "trajectories.jsonl is a trajectories file" in done.stderr
    # The parent of run folders: its subfolders are named in the hint.
    done = agenttrace("export", "--from", str(run_folder.parent), "--out", "t.jsonl", cwd=tmp_path)
    assert done.returncode == 1 and "subfolders are not searched" in done.stderr


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """CartPole episodes traced with the API: (live trajectories, the SDK's spans)."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    runtime = at.configure(
        out=str(tmp_path_factory.mktemp("cartpole")),
        run_name="r",
        sinks=["jsonl"],
        spans=["file"],
        tracer_provider=provider,
    )
    play_cartpole(episodes=3, max_steps=15)
    runtime.shutdown()
    at.shutdown()
    live = load_trajectories(runtime.trajectory_paths)
    return live, list(memory.get_finished_spans()), runtime.span_paths[0]


def test_collector_folders_rotated_json_and_protobuf(cartpole, tmp_path) -> None:
    live, spans, span_file = cartpole
    trajectories = (span_file.parent / "trajectories.jsonl").read_bytes()
    # The Collector's JSON: one export per line, a full file renamed with a timestamp.
    lines = span_file.read_text().splitlines(keepends=True)
    json_folder = tmp_path / "collector-json"
    json_folder.mkdir()
    half = len(lines) // 2
    (json_folder / "traces-2024-05-01T10-00-00.000.json").write_text("".join(lines[:half]))
    (json_folder / "traces.json").write_text("".join(lines[half:]))
    (json_folder / "trajectories.jsonl").write_bytes(trajectories)
    # format: proto, length-prefixed, rotated the same way, under names of any kind.
    proto_folder = tmp_path / "collector-proto"
    proto_folder.mkdir()
    frames = [encode_spans(spans[i : i + 16]).SerializeToString() for i in range(0, len(spans), 16)]
    third = len(frames) // 3
    for name, part in (
        ("otel-2024-05-01T10-00-00.000", frames[:third]),
        ("otel-2024-05-01T11-00-00.000", frames[third : 2 * third]),
        ("otel", frames[2 * third :]),
    ):
        (proto_folder / name).write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in part))
    (proto_folder / "trajectories.jsonl").write_bytes(trajectories)
    for folder in (json_folder, proto_folder):
        done = agenttrace("export", "--from", str(folder), "--out", "t.jsonl", cwd=folder.parent)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert "spans of no episode" not in done.stdout and "late" not in done.stdout
        assert_same_episodes(live, load_trajectories(folder.parent / "t.jsonl"))
        (folder.parent / "t.jsonl").unlink()
    assert [p.name for p in open_source(str(proto_folder)).files] == [
        "otel-2024-05-01T10-00-00.000",
        "otel-2024-05-01T11-00-00.000",
        "otel",
    ]  # oldest backup first, the file being written last

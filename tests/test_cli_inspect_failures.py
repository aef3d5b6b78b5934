"""``agenttrace inspect`` on files that are not trajectories, and text that must print as is."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

import agenttrace as at
from agenttrace.cli.main import main
from agenttrace.sinks import JsonlSink
from agenttrace.trajectory.model import Trajectory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_trajectories(folder: Path, *trajectories: Trajectory) -> Path:
    sink = JsonlSink(folder)
    for trajectory in trajectories:
        sink.write(trajectory)
    sink.close()
    return folder / "trajectories.jsonl"


# --- text from files and errors prints literally ---------------------------------------------


def test_statuses_and_paths_read_from_files_print_literally(tmp_path, capsys):
    folder = tmp_path / "run [a]"
    folder.mkdir()
    path = write_trajectories(
        folder,
        Trajectory(episode_id="e1", status="needs [parquet]"),
        Trajectory(episode_id="e2", status="[bold]loud[/]"),
        Trajectory(episode_id="e3", status=":thumbs_up:"),
    )
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 0, err
    assert f"3 episodes from {path}" in out
    for status in ("needs [parquet]", "[bold]loud[/]", ":thumbs_up:"):
        assert f"│ {status}" in out


def test_an_install_hint_in_an_error_prints_literally(tmp_path, capsys, monkeypatch):
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, out, err = run(capsys, "inspect", str(tmp_path / "t.parquet"))
    assert code == 1
    assert out == ""
    assert "pip install -e '.[parquet]'" in err


# --- a file that holds no trajectory: no empty table, and what the file is -------------------


@pytest.fixture
def spans_file(tmp_path) -> Path:
    """The span file of a real run: two episodes with a model call each."""
    runtime = at.configure(out=str(tmp_path), run_name="r", sinks=["jsonl"], spans=["file"])
    for number in range(2):
        with at.episode(task_id=f"task-{number}"):
            with at.timestep():
                with at.agent_act() as act:
                    with at.llm_call(model="m") as call:
                        call.record(
                            input_messages=[{"role": "user", "content": "hi"}],
                            output_messages=[{"role": "assistant", "content": "+1"}],
                        )
                    act.record(observation=number, action="+1")
                with at.env_step() as step:
                    step.record_result((number + 1, 1.0, True, False, {}))
    runtime.shutdown()
    (path,) = runtime.span_paths
    return path


def _fails_without_output(capsys, *argv: str) -> str:
    """Run inspect; it must exit 1 with nothing on stdout (no table); returns stderr."""
    code, out, err = run(capsys, "inspect", *argv)
    assert code == 1
    assert out == ""
    assert "agenttrace inspect: error: no trajectory could be read" in err
    return err


def test_a_span_file_is_named_with_the_command_that_rebuilds_it(spans_file, tmp_path, capsys):
    for argv in ([str(spans_file)], ["--json", str(spans_file)], [str(spans_file), "--worst", "1"]):
        err = _fails_without_output(capsys, *argv)
        assert f"{spans_file}: this is a span file (OTLP/JSON lines); rebuild trajectories " in err
        assert f"agenttrace export --from {spans_file} --out trajectories.jsonl" in err
        assert "bad record" in err and "missing required key" not in err  # no noise
    # Gzipped, under another name: told by its content, not its name.
    hidden = tmp_path / "collector output.jsonl.gz"
    hidden.write_bytes(gzip.compress(spans_file.read_bytes()))
    err = _fails_without_output(capsys, str(hidden))
    assert f"agenttrace export --from '{hidden}' --out trajectories.jsonl" in err  # quoted
    # The command works: the span file does rebuild into trajectories.
    rebuilt = tmp_path / "trajectories.jsonl"
    assert main(["export", "--from", str(hidden), "--out", str(rebuilt), "--quiet"]) == 0
    code, out, _ = run(capsys, "inspect", str(rebuilt))
    assert code == 0 and "2 episodes" in out


def test_a_collector_protobuf_span_file_is_named(tmp_path, capsys):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "episode"
    payload = request.SerializeToString()
    path = tmp_path / "traces.jsonl"  # the Collector's path can be named anything
    path.write_bytes(len(payload).to_bytes(4, "big") + payload)
    err = _fails_without_output(capsys, str(path))
    assert "this is a span file (the Collector's OTLP protobuf)" in err


def test_a_chat_export_is_named(spans_file, tmp_path, capsys):
    chat = tmp_path / "sft.jsonl"
    argv = ["export", "--from", str(spans_file), "--out", str(chat), "--format", "chat", "-q"]
    assert main(argv) == 0
    assert "messages" in json.loads(chat.read_text().splitlines()[0])
    err = _fails_without_output(capsys, str(chat))
    assert f"{chat}: this is an export in chat format (one row per model call" in err
    assert "not trajectories" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"episode,return\nep-1,1.0\n", "not JSON: it starts with 'episode,return'"),
        (bytes(range(256)) * 4, "binary data, not JSON lines"),
        (b"[1, 2]\n[3]\n", "JSON whose records are not objects (the first is '[1, 2]')"),
        (
            b'{"episode_id": "e1", "return": 1.0, "steps": []}\n',
            'JSON without the trajectory schema tag ("schema": "agenttrace.trajectory/1"); '
            "its first record has the keys episode_id, return, steps",
        ),
        (
            b'{"schema": "someone.else/3", "id": 1}\n',
            "JSON with the schema tag 'someone.else/3', not 'agenttrace.trajectory/1'",
        ),
    ],
    ids=["csv", "binary", "not-objects", "no-schema-tag", "other-schema-tag"],
)
def test_anything_else_is_described_as_found(tmp_path, capsys, content, said):
    path = tmp_path / "data.jsonl"
    path.write_bytes(content)
    err = _fails_without_output(capsys, str(path))
    assert err.count("\n") == 1  # one line, saying what the file is
    assert err.endswith(f" bad record): {path}: {said}\n") or err.endswith(
        f" bad records): {path}: {said}\n"
    )


def test_broken_trajectories_show_their_errors_and_no_guess(tmp_path, capsys):
    path = write_trajectories(tmp_path, Trajectory(episode_id="e1"))
    record = json.loads(path.read_text())
    del record["steps"]
    path.write_text(json.dumps(record) + "\n")
    err = _fails_without_output(capsys, str(path))
    assert f"{path}:1: trajectory is missing required key(s): steps" in err
    assert f"  {path}: " not in err  # it is a trajectory file: no description

"""``agenttrace inspect`` on files that are not trajectories, and text that must print as is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
    assert "pip install 'otel-agenttrace[parquet]'" in err

"""Loading what runs wrote: a runs folder, one run folder, a file, globs of files or folders.

The layout is the pipeline's own (agenttrace_runs/<run>/trajectories*.jsonl, a Parquet
sink's parts, a JSON-per-episode sink's episodes/ folder, spans.jsonl beside them). Each
episode must come back exactly once, runs in the order they were written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest_sinks_helpers import make_trajectory

from agenttrace.cli.main import main
from agenttrace.sinks import JsonDirSink, JsonlSink, ParquetSink, load_trajectories


def _write(folder: Path, first: int, count: int, *, sinks=(JsonlSink,)) -> list:
    """``count`` episodes with ids from ``first``, through every sink in ``sinks``."""
    batch = [make_trajectory(i, steps=1) for i in range(first, first + count)]
    for index, trajectory in enumerate(batch):
        trajectory.episode_id = f"ep-{first + index}"
    for sink_class in sinks:
        target = folder / "episodes" if sink_class is JsonDirSink else folder
        sink = sink_class(target)
        for trajectory in batch:
            sink.write(trajectory)
        sink.close()
    (folder / "spans.jsonl").write_text('{"resourceSpans": []}\n')
    return batch


def _age(folder: Path, seconds_ago: float) -> None:
    """Make every file under ``folder`` look written ``seconds_ago``."""
    when = 1_700_000_000 - seconds_ago
    for path in folder.rglob("*"):
        os.utime(path, (when, when))


@pytest.fixture
def runs(tmp_path):
    """agenttrace_runs/ with three runs; the one named first alphabetically was written last."""
    root = tmp_path / "agenttrace_runs"
    old = _write(root / "run-20260101-000000-11", 0, 2)
    middle = _write(
        root / "run-20260102-000000-22", 10, 3, sinks=(JsonlSink, ParquetSink, JsonDirSink)
    )
    new = _write(root / "demo-20260103-000000-abcdef", 20, 2)
    _age(root / "run-20260101-000000-11", 300)
    _age(root / "run-20260102-000000-22", 200)
    _age(root / "demo-20260103-000000-abcdef", 100)
    return root, old + middle + new


def _ids(trajectories) -> list[str]:
    return [t.episode_id for t in trajectories]


def test_the_runs_folder_gives_every_episode_once_newest_run_last(runs):
    root, expected = runs
    assert load_trajectories(root) == expected
    assert load_trajectories(str(root) + "/") == expected


def test_one_run_folder_a_file_and_globs(runs):
    root, expected = runs
    middle = expected[2:5]
    assert load_trajectories(root / "run-20260102-000000-22") == middle
    assert load_trajectories(root / "run-20260102-000000-22" / "trajectories.jsonl") == middle
    # Quoted folder globs: each matched run folder, newest last.
    assert _ids(load_trajectories(str(root / "run-*"))) == _ids(expected[:5])
    assert _ids(load_trajectories(str(root / "*"))) == _ids(expected)
    # A glob of files keeps folder order, as before.
    assert load_trajectories(str(root / "*" / "trajectories*.jsonl")) == (
        expected[5:] + expected[:5]
    )


def test_a_run_with_only_a_json_per_episode_sink(tmp_path):
    run = tmp_path / "runs" / "run-1"
    batch = _write(run, 0, 3, sinks=(JsonDirSink,))
    assert sorted(_ids(load_trajectories(tmp_path / "runs"))) == _ids(batch)


def test_a_folder_of_span_files_only_says_to_export(tmp_path):
    run = tmp_path / "runs" / "run-1"
    run.mkdir(parents=True)
    (run / "spans.jsonl").write_text('{"resourceSpans": []}\n')
    with pytest.raises(FileNotFoundError, match="agenttrace export --from"):
        load_trajectories(tmp_path / "runs")
    with pytest.raises(FileNotFoundError, match="or its run folders"):
        load_trajectories(tmp_path / "runs" / "run-1")


def test_inspect_reads_the_runs_folder_and_a_folder_glob(runs, capsys):
    root, _ = runs
    assert main(["inspect", "--json", str(root)]) == 0
    assert '"episodes": 7' in capsys.readouterr().out
    assert main(["inspect", "--json", str(root / "run-*")]) == 0
    assert '"episodes": 5' in capsys.readouterr().out


def test_only_run_folders_are_read_below_the_folder_given(runs, tmp_path):
    """Other files below a runs folder (notes, configs) are not taken for trajectories, and a
    symlink to a run is not followed (that run would be read twice)."""
    root, expected = runs
    (root / "notes").mkdir()
    (root / "notes" / "settings.json").write_text('{"lr": 0.1}')
    (root / "link-to-a-run").symlink_to(root / "run-20260101-000000-11", target_is_directory=True)
    errors = []
    assert load_trajectories(root, on_error=errors.append) == expected
    assert errors == []


def test_globs_of_rotated_files_and_recursive_patterns(tmp_path):
    run = tmp_path / "runs" / "run-1"
    sink = JsonlSink(run, max_bytes=1)  # one file per episode: trajectories.jsonl, -00001, ...
    batch = [make_trajectory(i, steps=1) for i in range(12)]
    for trajectory in batch:
        sink.write(trajectory)
    sink.close()
    assert len(list(run.glob("trajectories*.jsonl"))) == 12
    assert load_trajectories(str(run / "trajectories*.jsonl")) == batch
    assert load_trajectories(str(tmp_path / "**" / "trajectories*.jsonl")) == batch

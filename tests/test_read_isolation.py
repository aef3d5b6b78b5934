"""One damaged line or value costs only itself, on every read path (issue 22, part 1).

A 40-episode demo run's span file, one episode a line, is damaged in one line (or one value)
per class of the tester's crashes: JSON nested past the stack, content nested past
``codec.MAX_DEPTH``, ``rl.*`` values of the wrong type or beyond a float (10^400), a status
that is a number, an episode length of 10^9, a weird step index, zstd data without the
zstandard package. Each time ``agenttrace export`` writes every other episode equal to a clean
export (the damaged one too, minus the value, when only a value was bad), prints one error
naming the file, the line and the field, and exits 3 ("partial").
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agenttrace import semconv as sc
from agenttrace.cli.export import EXIT_PARTIAL
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.storage import encode_lines, read_otlp_json
from agenttrace.trajectory import Trajectory, codec
from agenttrace.trajectory.assembler import build_trajectory
from agenttrace.trajectory.json_depth import is_deep
from agenttrace.trajectory.outcome import MISSING_STEPS_FLOOR
from agenttrace.trajectory.records import SpanRecord

EPISODES = 40
HUGE = "1" + "0" * 400  # 10^400: JSON reads it as a Python int no float holds


class Run:
    """The clean run: its span file (one episode a line) and its clean export."""

    def __init__(self, spans: Path, lines: list[str], episode_of_line: list[str]) -> None:
        self.spans = spans
        self.lines = lines
        self.episode_of_line = episode_of_line
        self.clean: dict[str, Trajectory] = {}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    folder = tmp_path_factory.mktemp("demo")
    argv = ["demo", "-n", str(EPISODES), "--seed", "7", "--out", str(folder), "--run-name", "r"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    records = list(read_otlp_json(folder / "r" / "spans.jsonl"))
    by_trace: dict[int, list[SpanRecord]] = {}
    for record in records:  # the demo plays each episode in a trace of its own
        by_trace.setdefault(record.trace_id, []).append(record)
    lines, episodes = [], []
    for trace in by_trace.values():
        (episode,) = [r for r in trace if r.name == sc.EPISODE]
        lines.append(encode_lines(trace))
        episodes.append(episode.attributes[sc.EPISODE_ID])
    assert len(lines) == EPISODES
    spans = folder / "spans.jsonl"
    spans.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = Run(spans, lines, episodes)
    clean = folder / "clean.jsonl"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["export", "--from", str(spans), "--out", str(clean), "--quiet"]) == 0
    result.clean = {t.episode_id: t for t in load_trajectories(clean)}
    assert set(result.clean) == set(episodes)
    return result


# --- damage -----------------------------------------------------------------------------------


def _spans(document: dict) -> list[dict]:
    return [
        span
        for resource_spans in document["resourceSpans"]
        for scope in resource_spans["scopeSpans"]
        for span in scope["spans"]
    ]


def _attribute(span: dict, key: str) -> Any:
    for item in span.get("attributes") or []:
        if item["key"] == key:
            return item["value"]
    return None


def set_value(name: str, key: str, value: Any, index: int | None = 0) -> Callable[[str], str]:
    """A damage: attribute ``key`` of the line's ``name`` span (of step ``index``) set to the
    AnyValue ``value`` (a dict, or JSON text put in place as it is)."""

    def damage(line: str) -> str:
        document = json.loads(line)
        for span in _spans(document):
            if span["name"] != name:
                continue
            step = _attribute(span, sc.TIMESTEP_INDEX)
            if index is not None and (step is None or int(step["intValue"]) != index):
                continue
            kept = [item for item in span.get("attributes") or [] if item["key"] != key]
            marker = "__damaged_value__"
            span["attributes"] = [*kept, {"key": key, "value": marker}]
            text = json.dumps(document)
            replacement = value if isinstance(value, str) else json.dumps(value)
            return text.replace(json.dumps(marker), replacement, 1)
        raise AssertionError(f"no {name} span of step {index} in the line")

    return damage


def nested_array(levels: int) -> str:
    """An AnyValue of arrays nested ``levels`` deep (3 JSON levels each)."""
    return '{"arrayValue":{"values":[' * levels + '{"intValue":"1"}' + "]}}" * levels


def export(run: Run, tmp_path: Path, capsys, source: Path, *options: str) -> tuple[int, str]:
    out = tmp_path / "out.jsonl"
    code = main(["export", "--from", str(source), "--out", str(out), "--quiet", *options])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def damaged_export(
    run: Run, tmp_path: Path, capsys, damage: Callable[[str], str], at: int = 7
) -> tuple[int, str, Path, dict[str, Trajectory], str]:
    """Export the run with line ``at`` damaged: (exit code, stderr, the damaged file, the
    episodes written by id, the damaged line's episode id)."""
    lines = list(run.lines)
    lines[at] = damage(lines[at])
    source = tmp_path / "spans.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    code, err = export(run, tmp_path, capsys, source)
    written = {t.episode_id: t for t in load_trajectories(tmp_path / "out.jsonl")}
    return code, err, source, written, run.episode_of_line[at]


def assert_isolated(run: Run, written: dict[str, Trajectory], damaged: str, *, kept: bool):
    """Every undamaged episode equals the clean export's; the damaged one is there or not."""
    assert len(written) == (EPISODES if kept else EPISODES - 1)
    assert (damaged in written) is kept
    for episode_id, clean in run.clean.items():
        if episode_id != damaged:
            assert written[episode_id] == clean, episode_id


def assert_one_error(err: str, source: Path, line: int, *fields: str) -> str:
    """The one located error line of a partial export; returned."""
    assert "1 line or value could not be decoded" in err and "exit status 3" in err
    (located,) = [row for row in err.splitlines() if row.strip().startswith(f"{source}:")]
    assert located.strip().startswith(f"{source}:{line}:"), located
    for field in fields:
        assert field in located, (field, located)
    return located


# --- the classes ------------------------------------------------------------------------------


def test_json_nested_past_the_stack_costs_its_line(run, tmp_path, capsys) -> None:
    damage = set_value(sc.ENV_STEP, "deep.value", nested_array(450))  # 1,350 JSON levels
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage, at=3)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=False)
    located = assert_one_error(err, source, 4)
    assert "nested too deeply" in located and "skipped" in located


def test_a_line_nested_past_the_stack_as_a_whole(run, tmp_path, capsys) -> None:
    def damage(line: str) -> str:
        return "[" * 2000 + line + "]" * 2000

    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage, at=0)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=False)
    assert "nested too deeply" in assert_one_error(err, source, 1)


@pytest.mark.parametrize("depth", [300, 900, 2500])
def test_an_observation_nested_too_deeply_is_kept_as_its_json_text(
    run, tmp_path, capsys, depth
) -> None:
    text = '{"a":' * depth + "1" + "}" * depth
    damage = set_value(sc.AGENT_ACT, sc.OBSERVATION, {"stringValue": text}, index=1)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, "steps[1].observation", "nested deeper than 256")
    trajectory = written[damaged]  # read back from the file with load_trajectories
    assert trajectory.steps[1].observation == {codec.DEEP_TAG: text}
    assert "steps[1].observation" in trajectory.lossy
    clean = run.clean[damaged]
    assert [s.action for s in trajectory.steps] == [s.action for s in clean.steps]
    assert Trajectory.from_json(trajectory.to_json()) == trajectory


@pytest.mark.parametrize(
    "value, problem",
    [
        ({"stringValue": "lots"}, "a string ('lots'), not a number"),
        ({"stringValue": '"1.5"'}, "a string"),
        ({"arrayValue": {"values": [{"doubleValue": 1.0}]}}, "an array, not a number"),
        ('{"doubleValue":' + HUGE + "}", "about 10^400"),
        ({"intValue": HUGE}, "about 10^400, too large for a float"),
    ],
)
def test_a_bad_reward_is_left_out_and_the_step_kept(run, tmp_path, capsys, value, problem):
    damage = set_value(sc.ENV_STEP, sc.REWARD, value, index=1)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.REWARD, problem, "left out")
    trajectory, clean = written[damaged], run.clean[damaged]
    assert trajectory.steps[1].reward is None
    assert "steps[1].reward" in trajectory.lossy
    assert [s.index for s in trajectory.steps] == [s.index for s in clean.steps]
    assert trajectory.steps[0] == clean.steps[0]


def test_a_discount_that_is_text_is_left_out(run, tmp_path, capsys) -> None:
    damage = set_value(sc.ENV_STEP, sc.DISCOUNT, {"stringValue": "0.9x"}, index=0)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.DISCOUNT, "not a number")
    assert written[damaged].steps[0].discount is None
    assert "steps[0].discount" in written[damaged].lossy


def test_a_return_of_10_to_the_400_is_left_out(run, tmp_path, capsys) -> None:
    damage = set_value(sc.EPISODE, sc.EPISODE_RETURN, '{"doubleValue":' + HUGE + "}", None)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.EPISODE_RETURN, "10^400")
    trajectory, clean = written[damaged], run.clean[damaged]
    assert "return" in trajectory.lossy
    assert trajectory.return_ == pytest.approx(sum(s.reward or 0.0 for s in clean.steps))


def test_a_status_that_is_a_number_is_left_out_and_summarised(run, tmp_path, capsys) -> None:
    damage = set_value(sc.EPISODE, sc.EPISODE_STATUS, {"intValue": "5"}, None)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.EPISODE_STATUS, "an integer (5), not a string")
    trajectory = written[damaged]
    assert isinstance(trajectory.status, str) and "status" in trajectory.lossy
    # the summary too (the tester's crash came after the file was written)
    out = tmp_path / "summarised.jsonl"
    assert main(["export", "--from", str(source), "--out", str(out)]) == EXIT_PARTIAL
    assert "Traceback" not in capsys.readouterr().err
    assert main(["inspect", str(out)]) == 0


@pytest.mark.parametrize("claim", [10**6, 10**9, 2**63 - 1])
def test_a_huge_length_claim_is_left_out_quickly(run, tmp_path, capsys, claim) -> None:
    damage = set_value(sc.EPISODE, sc.EPISODE_LENGTH, {"intValue": str(claim)}, None)
    started = time.perf_counter()
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert time.perf_counter() - started < 30  # nothing is allocated from the claim
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.EPISODE_LENGTH, str(claim), "far beyond")
    trajectory, clean = written[damaged], run.clean[damaged]
    assert trajectory.length == len(clean.steps) and trajectory.missing_steps == []
    assert "length" in trajectory.lossy and trajectory.steps == clean.steps


def test_a_length_past_int64_is_left_out(run, tmp_path, capsys) -> None:
    damage = set_value(sc.EPISODE, sc.EPISODE_LENGTH, {"intValue": HUGE}, None)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.EPISODE_LENGTH, "not a whole number")


@pytest.mark.parametrize(
    "value", [{"stringValue": "two"}, {"intValue": "-1"}, {"intValue": HUGE}, {"doubleValue": 1.5}]
)
def test_a_weird_step_index_is_left_out(run, tmp_path, capsys, value) -> None:
    damage = set_value(sc.TIMESTEP, sc.TIMESTEP_INDEX, value, index=1)
    code, err, source, written, damaged = damaged_export(run, tmp_path, capsys, damage)
    assert code == EXIT_PARTIAL
    assert_isolated(run, written, damaged, kept=True)
    assert_one_error(err, source, 8, sc.TIMESTEP_INDEX, "not a whole number")
    trajectory, clean = written[damaged], run.clean[damaged]
    assert [s.index for s in trajectory.steps] == [s.index for s in clean.steps]
    assert trajectory.steps[1].action == clean.steps[1].action


def test_zstd_frames_without_zstandard_cost_their_frame(run, tmp_path, capsys, monkeypatch):
    zstandard = pytest.importorskip("zstandard")
    frames = []
    for number, line in enumerate(run.lines):
        payload = line.encode()
        if number == 5:
            payload = zstandard.ZstdCompressor().compress(payload)
        frames.append(len(payload).to_bytes(4, "big") + payload)
    source = tmp_path / "spans.pb"
    source.write_bytes(b"".join(frames))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # `import zstandard` fails
    code, err = export(run, tmp_path, capsys, source)
    assert code == EXIT_PARTIAL
    written = {t.episode_id: t for t in load_trajectories(tmp_path / "out.jsonl")}
    assert_isolated(run, written, run.episode_of_line[5], kept=False)
    located = assert_one_error(err, source, 6)  # (the frame number as the line)
    assert "frame 6 at byte" in located and "pip install -e '.[zstd]' from a clone" in located


def test_clean_input_still_exits_0_and_says_nothing(run, tmp_path, capsys) -> None:
    code, err = export(run, tmp_path, capsys, run.spans)
    assert code == 0 and err == ""


def test_many_problems_are_counted_and_the_first_five_shown(run, tmp_path, capsys) -> None:
    lines = [
        set_value(sc.ENV_STEP, sc.REWARD, {"stringValue": "x"}, index=0)(line) for line in run.lines
    ]
    source = tmp_path / "spans.jsonl"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    code, err = export(run, tmp_path, capsys, source)
    assert code == EXIT_PARTIAL
    assert f"{EPISODES} lines or values could not be decoded" in err and "first 5 shown" in err
    assert len([row for row in err.splitlines() if row.strip().startswith(str(source))]) == 5
    assert len(load_trajectories(tmp_path / "out.jsonl")) == EPISODES


# --- the rules underneath ---------------------------------------------------------------------


def _record(name: str, span_id: int, **attributes: Any) -> SpanRecord:
    parent = 0 if name == sc.EPISODE else 1
    attributes = {sc.EPISODE_ID: "e", **attributes}
    return SpanRecord(7, span_id, parent, name, span_id, span_id + 1, attributes)


def test_the_assembler_leaves_bad_values_out_whoever_made_the_records() -> None:
    """Live records and other readers' are not checked by the file readers: the assembler
    itself never raises for a value, and says in ``lossy`` what it left out."""
    records = [
        _record(sc.EPISODE, 1, **{sc.EPISODE_STATUS: 3, sc.EPISODE_RETURN: 10**400}),
        _record(sc.ENV_STEP, 2, **{sc.TIMESTEP_INDEX: 0, sc.REWARD: "lots", sc.DISCOUNT: (1,)}),
        _record(sc.ENV_STEP, 3, **{sc.TIMESTEP_INDEX: 1, sc.REWARD: 2, sc.TERMINATED: True}),
        _record(sc.ENV_STEP, 4, **{sc.TIMESTEP_INDEX: 2**70, sc.REWARD: 1.0}),
    ]
    trajectory = build_trajectory(records)
    assert [s.index for s in trajectory.steps] == [0, 1]
    assert trajectory.steps[0].reward is None and trajectory.steps[0].discount is None
    assert trajectory.steps[1].reward == 2.0 and trajectory.return_ == 2.0
    assert trajectory.status == sc.STATUS_COMPLETED
    assert set(trajectory.lossy) >= {"steps[0].reward", "steps[0].discount", "status", "return"}
    assert Trajectory.from_json(trajectory.to_json()) == trajectory


@pytest.mark.parametrize("claim", [10**9, 10**18])
def test_missing_steps_are_bounded_by_the_steps_seen(claim) -> None:
    steps = [_record(sc.ENV_STEP, 10 + i, **{sc.TIMESTEP_INDEX: i}) for i in range(3)]
    far = _record(sc.ENV_STEP, 99, **{sc.TIMESTEP_INDEX: claim})  # a step far beyond
    episode = _record(sc.EPISODE, 1, **{sc.EPISODE_LENGTH: claim + 1})
    started = time.perf_counter()
    trajectory = build_trajectory([episode, *steps, far])
    assert time.perf_counter() - started < 5
    assert trajectory.length == claim + 1  # what the spans show: a step at index `claim`
    assert trajectory.missing_steps == list(range(3, 3 + MISSING_STEPS_FLOOR))
    assert trajectory.status == sc.STATUS_INCOMPLETE
    assert "missing_steps" in trajectory.lossy


def test_a_length_claim_within_the_bound_still_lists_its_missing_steps() -> None:
    steps = [_record(sc.ENV_STEP, 10 + i, **{sc.TIMESTEP_INDEX: i}) for i in range(3)]
    episode = _record(sc.EPISODE, 1, **{sc.EPISODE_LENGTH: 500})
    trajectory = build_trajectory([episode, *steps])
    assert trajectory.length == 500 and trajectory.missing_steps == list(range(3, 500))
    assert trajectory.status == sc.STATUS_INCOMPLETE and not trajectory.lossy


def test_the_codec_keeps_values_past_max_depth_as_json_text(tmp_path) -> None:
    for depth in (codec.MAX_DEPTH + 1, 600, 5000):  # 5000: past Python's recursion limit too
        value: Any = 1
        for _ in range(depth):
            value = [value]
        text = codec.dumps(value)
        assert text.startswith('{"$json":') and not is_deep(text)
        assert codec.loads(text) == {codec.DEEP_TAG: json.loads(text)[codec.DEEP_TAG]}
        assert codec.encode(value) == json.loads(text)
    shallow: Any = 1
    for _ in range(codec.MAX_DEPTH):
        shallow = [shallow]
    assert json.loads(codec.dumps(shallow)) == shallow  # exactly MAX_DEPTH levels: as it is
    deep_text = "[" * 3000 + "]" * 3000
    assert codec.loads(deep_text) == {codec.DEEP_TAG: deep_text}
    assert json.loads(codec.checked_json(deep_text)) == {codec.DEEP_TAG: deep_text}
    assert type(codec.checked_json("[" * 3000)) is str  # not JSON: plain text
    holds_itself: list = []
    holds_itself.append(holds_itself)
    with pytest.raises(RecursionError):
        codec.dumps(holds_itself)

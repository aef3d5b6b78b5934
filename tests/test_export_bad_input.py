"""Bad stored spans never cost the good ones (issue 4, "Bad input").

Span files of a real run are damaged in generated ways: malformed and truncated lines, spans
with hostile fields next to good ones, duplicated lines, spans of unrelated services, parent
cycles, orphans, hostile episode ids and huge attributes. Whatever the mix, reading and the
streaming rebuild never raise, every bad line or span gets exactly one error naming where it
is, and every episode of the run comes out once and equal to the live trajectory.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.storage import SpanFormatError, encode_lines, read_otlp_json
from agenttrace.trajectory import SpanRecord, StreamingAssembler, Trajectory

BATCH = 7  # spans per line of the good file


def _good_lines(records: list[SpanRecord]) -> list[str]:
    return [encode_lines(records[i : i + BATCH]) for i in range(0, len(records), BATCH)]


def _span_json(**fields) -> dict:
    span = {
        "traceId": "5" * 32,
        "spanId": "6" * 16,
        "name": "x",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    span.update(fields)
    return {k: v for k, v in span.items() if v is not None}


def _line(*spans: dict, service: str = "elsewhere") -> str:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]}
    document = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": list(spans)}]}]}
    return json.dumps(document)


# Spans the decoder must refuse, each with its own reason.
HOSTILE_SPANS = [
    _span_json(traceId="zz" * 16),
    _span_json(traceId="5" * 31),
    _span_json(spanId="0" * 16),
    _span_json(spanId=None),
    _span_json(traceId=12345),
    _span_json(name=["not", "a", "name"]),
    _span_json(startTimeUnixNano="yesterday"),
    _span_json(attributes="not a list"),
    _span_json(attributes=[{"key": "a", "value": {"intValue": "12x"}}]),
    _span_json(events=7),
    _span_json(kind="SIDEWAYS"),
    "a span that is a string",
]

_not_json = st.text(
    alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=60,
).filter(lambda text: text.strip() and not _parses(text))


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


KINDS = (
    "garbage",
    "torn",
    "hostile span",
    "duplicate",
    "unrelated",
    "cycle",
    "orphan",
    "hostile episode",
)
HOSTILE_EPISODE_IDS = ("../../etc/passwd", "ep\x00id", "é" * 300, " ")

# One damage: (kind, where to insert it, which good line or hostile value, garbage text).
damages = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(0, 10_000),
        st.integers(0, 10_000),
        _not_json,
    ),
    max_size=12,
)


def apply_damage(good: list[str], plan) -> tuple[list[str], int, int]:
    """(lines of the damaged file, bad lines or spans in it, extra valid episodes in it)."""
    lines = list(good)
    errors = extra_episodes = 0
    for number, (kind, where, choice, garbage) in enumerate(plan):
        at = where % (len(lines) + 1)
        source = good[choice % len(good)]
        if kind == "garbage":
            lines.insert(at, garbage)
            errors += 1
        elif kind == "torn":
            lines.insert(at, source[: 1 + choice % (len(source) - 2)])
            errors += 1
        elif kind == "hostile span":
            neighbour = _span_json(spanId="7" * 16)  # a good span of no episode, kept
            lines.insert(at, _line(neighbour, HOSTILE_SPANS[choice % len(HOSTILE_SPANS)]))
            errors += 1
        elif kind == "duplicate":
            lines.insert(at, source)
        elif kind == "unrelated":
            lines.insert(at, _line(_span_json(spanId="8" * 16, parentSpanId="9" * 16)))
        elif kind == "cycle":
            a = _span_json(traceId="4" * 32, spanId="1" * 16, parentSpanId="2" * 16)
            b = _span_json(traceId="4" * 32, spanId="2" * 16, parentSpanId="1" * 16)
            lines.insert(at, _line(a, b))
        elif kind == "orphan":
            lines.insert(at, _line(_span_json(traceId="3" * 32, parentSpanId="a" * 16)))
        else:
            episode_id = HOSTILE_EPISODE_IDS[choice % len(HOSTILE_EPISODE_IDS)]
            attributes = [
                {"key": sc.EPISODE_ID, "value": {"stringValue": episode_id}},
                {"key": "note", "value": {"stringValue": "x" * (100_000 if choice % 2 else 10)}},
            ]
            span = _span_json(
                traceId="%032x" % (0xABC + number),
                name=sc.EPISODE,
                attributes=attributes,
            )
            if not any(json.dumps(episode_id) in line for line in lines):
                extra_episodes += 1
            lines.insert(at, _line(span))
    return lines, errors, extra_episodes


def _rebuild(path: Path) -> tuple[list[Trajectory], list[SpanFormatError], StreamingAssembler]:
    errors: list[SpanFormatError] = []
    assembler = StreamingAssembler(grace=50)
    trajectories = list(assembler.feed(read_otlp_json(path, on_error=errors.append)))
    return trajectories, errors, assembler


@pytest.fixture(scope="module")
def good_lines(cartpole_run) -> list[str]:
    return _good_lines(cartpole_run[1])


def test_damaged_span_files_cost_no_good_episode(cartpole_run, good_lines, tmp_path) -> None:
    live, _ = cartpole_run
    by_id = {t.episode_id: t for t in live}
    path = tmp_path / "spans.jsonl"

    @settings(
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(damages)
    def check(plan) -> None:
        lines, bad, extra = apply_damage(good_lines, plan)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        trajectories, errors, _ = _rebuild(path)
        assert len(errors) == bad, [str(e) for e in errors]
        assert all(error.source == str(path) and error.line for error in errors)
        rebuilt = {t.episode_id: t for t in trajectories}
        assert len(rebuilt) == len(trajectories), "an episode came out twice"
        for episode_id, trajectory in by_id.items():
            assert rebuilt[episode_id] == trajectory, episode_id
        assert len(rebuilt) == len(by_id) + extra
        for trajectory in trajectories:  # whatever came out can be written and read back
            assert Trajectory.from_json(trajectory.to_json()) == trajectory

    check()


def test_truncated_file_keeps_every_complete_line(cartpole_run, good_lines, tmp_path) -> None:
    """A file cut anywhere (the writer died): lines before the cut are all used."""
    live, records = cartpole_run
    text = "".join(line + "\n" for line in good_lines)
    path = tmp_path / "spans.jsonl"
    rng = random.Random(4)
    for cut in sorted(rng.sample(range(1, len(text)), 60)):
        path.write_text(text[:cut], encoding="utf-8")
        trajectories, errors, assembler = _rebuild(path)
        complete_lines = text[:cut].count("\n")
        torn = 0 if text[:cut].endswith("\n") or _parses(text[:cut].rsplit("\n", 1)[-1]) else 1
        assert len(errors) == torn
        assert assembler.counts.records == min(len(records), complete_lines * BATCH)
        for trajectory in trajectories:
            original = next(t for t in live if t.episode_id == trajectory.episode_id)
            if trajectory.status != sc.STATUS_INCOMPLETE:
                assert trajectory == original


def test_the_export_command_reports_each_bad_line_and_writes_the_good(
    cartpole_run, good_lines, tmp_path, capsys
) -> None:
    live, _ = cartpole_run
    lines = list(good_lines)
    lines.insert(3, "{oops")
    lines.insert(5, _line(_span_json(), HOSTILE_SPANS[0]))
    lines.insert(8, lines[1])
    source = tmp_path / "spans.jsonl"
    source.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "t.jsonl"
    assert main(["export", "--from", str(source), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "2 unreadable records skipped" in captured.err
    assert f"{source}:4:" in captured.err and f"{source}:6:" in captured.err
    assert {t.episode_id: t for t in load_trajectories(out)} == {t.episode_id: t for t in live}

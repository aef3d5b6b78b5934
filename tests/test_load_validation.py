"""One validated schema at the trajectory boundary (issue 22, part 2).

Real trajectories are written by the pipeline, then mutated the ways a tester found loaders
crash on: wrong types (times, lengths, indices as strings), NaN and Infinity in integer
fields, finish reasons as an integer, ids and statuses of the wrong kind, a return of 10^400,
lone surrogates, nesting past the recursion limit. Whatever the mutation, loading never
raises; a bad record is reported with its file, line and field and skipped, the good ones
load equal to the originals, and everything that loads can be written again (to_json, the
Parquet sink) and summarised (``agenttrace inspect``, the summary and ``--worst 1``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import agenttrace as at
from agenttrace.cli import episode_view
from agenttrace.cli.main import main
from agenttrace.cli.summary import printable, render_summary, summarize
from agenttrace.sinks import JsonlSink, ParquetSink, TrajectoryLoadError, load_trajectories
from agenttrace.sinks.parquet import arrow_schema, trajectory_to_row
from agenttrace.trajectory.model import Trajectory, TrajectoryFormatError

SCHEMA = json.loads(
    (Path(__file__).parent.parent / "agenttrace" / "trajectory" / "schema.json").read_text()
)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
KNOWN_STATUSES = SCHEMA["properties"]["status"]["enum"]


# --- real trajectories ------------------------------------------------------------------------


def _play(number: int) -> None:
    """One episode of three steps: a model call (finish reasons, token counts, token ids and
    logprobs) and a tool call per step; the last episode raises, one reward is NaN."""
    with at.episode(task_id=f"task-{number}", group_id="g", group_size=3):
        with at.env_reset() as reset:
            reset.record_result((np.zeros(3, dtype=np.float32), {"seed": number}))
        for k in range(3):
            with at.timestep():
                with at.agent_act() as act:
                    with at.llm_call(model="m-1", provider="acme") as call:
                        call.record(
                            input_messages=[{"role": "user", "content": f"step {k} héllo"}],
                            output_messages=[{"role": "assistant", "content": "+1"}],
                            finish_reasons=["stop"],
                            input_tokens=5 + k,
                            output_tokens=2,
                            prompt_token_ids=[1, 2, 3 + k],
                            completion_token_ids=[7, 8],
                            completion_logprobs=[-0.5, -0.25],
                        )
                    with at.tool_call("calc") as tool:
                        tool.record(call_id=f"c{k}", arguments={"x": k}, result=k + 1)
                    act.record(observation=np.ones(3, dtype=np.float32) * k, action="+1")
                reward = math.nan if (number, k) == (1, 0) else 0.5 * (k + number)
                with at.env_step() as step:
                    step.record_result((np.ones(3) * (k + 1), reward, k == 2, False, {"k": k}))
        if number == 2:
            raise RuntimeError("boom")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[list[str], list[Trajectory]]:
    """The JSONL lines of three real episodes, and the trajectories they load as."""
    folder = tmp_path_factory.mktemp("real")
    runtime = at.configure(
        out=str(folder), run_name="r", sinks=["jsonl"], tokens=True, exit_report=False
    )
    for number in range(3):
        with contextlib.suppress(RuntimeError):
            _play(number)
    runtime.shutdown()
    at.shutdown()
    (path,) = runtime.trajectory_paths
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    originals = load_trajectories(path, on_error=_strict)
    assert len(lines) == len(originals) == 3
    assert {t.status for t in originals} == {"completed", "errored"}
    assert all(step.llm_calls and step.tool_calls for t in originals for step in t.steps)
    assert originals[0].steps[0].llm_calls[0].prompt_token_ids == [1, 2, 3]
    return lines, originals


def _strict(error: TrajectoryLoadError) -> None:
    raise error


# --- mutating documents -----------------------------------------------------------------------

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _keys(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PART.findall(path)]


def mutated(line: str, path: str, value: Any) -> dict:
    """The document of ``line`` with the field at ``path`` (``steps[0].index``) set."""
    document = json.loads(line)
    *parents, last = _keys(path)
    target = document
    for key in parents:
        target = target[key]
    target[last] = value
    return document


def write_lines(path: Path, *texts: str) -> Path:
    path.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    return path


def bad_file(folder: Path, lines: list[str], document: dict) -> Path:
    """good, bad, good: the bad record on line 2 (NaN and Infinity as the JSON literals)."""
    return write_lines(
        folder / "mutated.jsonl", lines[0], json.dumps(document, allow_nan=True), lines[1]
    )


def strict_streams() -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    """stdout/stderr that encode strictly to UTF-8, as a terminal does (a lone surrogate
    written raw fails there, not in a StringIO)."""
    return (
        io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True),
        io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True),
    )


def inspect(*argv: str) -> tuple[int, str, str]:
    """``agenttrace inspect ARGV`` in-process, on strict UTF-8 streams."""
    out, err = strict_streams()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["inspect", *argv])
    return code, _text_of(out), _text_of(err)


def _text_of(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8")


def inspect_ok(path: Path) -> None:
    """The summary and the worst episode print, exit 0, no traceback (in-process, a crash
    would raise here; stdout may show an episode's own recorded stack)."""
    for argv in ([str(path)], [str(path), "--worst", "1"]):
        code, out, err = inspect(*argv)
        assert code == 0, (argv, err)
        assert "Traceback" not in err
        assert out


def saved_and_summarised(trajectory: Trajectory, folder: Path, *, show: bool = True) -> None:
    """Everything that loads: to_json -> from_json gives it back, the re-saved JSON follows the
    schema, the JSONL and Parquet sinks write it (Parquet's row loads back), the summary and
    episode view print it."""
    text = trajectory.to_json()
    assert Trajectory.from_json(text) == trajectory
    document = json.loads(text)
    if document["status"] not in KNOWN_STATUSES:  # kept as written (docs: Validation)
        document["status"] = "completed"
    document["schema"] = "agenttrace.trajectory/1"  # (older versions are read too)
    assert VALIDATOR.is_valid(document), next(VALIDATOR.iter_errors(document)).message
    sink = JsonlSink(folder / "resaved")
    sink.write(trajectory)
    sink.close()
    if not _surrogate_in_plain_text(trajectory):
        parquet = ParquetSink(folder / "parquet")
        parquet.write(trajectory)
        parquet.close()
        (back,) = load_trajectories(parquet.paths, on_error=_strict)  # and reads it back
        assert back.episode_id == trajectory.episode_id
    if not show:  # (the caller runs inspect on it)
        return
    out, _ = strict_streams()
    console = Console(file=out, markup=False, emoji=False, highlight=False, soft_wrap=True)
    render_summary(summarize([trajectory]), console)
    for line in episode_view.episode_lines(trajectory):
        console.print(line)


def _surrogate_in_plain_text(trajectory: Trajectory) -> bool:
    """A lone surrogate in a plain text column (ids, status, step error, lossy): it loads
    and writes to JSON (as its escape), but Arrow strings must be valid UTF-8, so the Parquet
    sink refuses it (a write-side limit, not a load one)."""
    texts = [trajectory.episode_id, trajectory.trace_id, trajectory.task_id, trajectory.status]
    texts += [step.error for step in trajectory.steps]
    texts += [key + value for key, value in trajectory.lossy.items()]
    texts += list(trajectory.scores)
    return any(text is not None and not _utf8(text) for text in texts)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- every class of violation, reported with file, line and field -----------------------------

BIG = 10**400
NAN, INF = float("nan"), float("inf")
CALL = "steps[0].llm_calls[0]"
TOOL = "steps[0].tool_calls[0]"

#: (field, bad value): each makes the record break the schema; its report names the field.
VIOLATIONS = [
    ("episode_id", ["x"]),
    ("episode_id", 7),
    ("episode_id", None),
    ("schema", 1),
    ("schema", "agenttrace.trajectory/2"),
    ("trace_id", 12),
    ("trace_id", "not-hex"),
    ("task_id", ["t"]),
    ("status", 3),
    ("status", None),
    ("error", "boom"),
    ("error.type", 5),
    ("error.stack", ["line"]),
    ("start_time", "12"),
    ("start_time", NAN),
    ("end_time", 1.5),
    ("return", "1.0"),
    ("return", None),
    ("return", True),
    ("return", {"$tuple": [1]}),
    ("return", {"$float": "big"}),
    ("length", "5"),
    ("length", NAN),
    ("length", INF),
    ("length", -1),
    ("length", True),
    ("attributes", [1]),
    ("steps", {"0": {}}),
    ("steps[0]", 5),
    ("steps[0].index", "0"),
    ("steps[0].index", NAN),
    ("steps[0].index", -2),
    ("steps[0].reward", "0.5"),
    ("steps[0].reward", False),
    ("steps[0].discount", [0.9]),
    ("steps[0].terminated", "yes"),
    ("steps[0].truncated", 0),
    ("steps[0].start_time", "soon"),
    ("steps[0].error", 3),
    ("steps[0].llm_calls", {"name": "x"}),
    ("steps[0].tool_calls", "calc"),
    (CALL, "chat"),
    (f"{CALL}.name", 5),
    (f"{CALL}.model", ["m"]),
    (f"{CALL}.finish_reasons", 3),
    (f"{CALL}.finish_reasons", ["stop", 1]),
    (f"{CALL}.input_tokens", "5"),
    (f"{CALL}.output_tokens", NAN),
    (f"{CALL}.start_time", INF),
    (f"{CALL}.error", {"type": "x"}),
    (f"{CALL}.attributes", "temperature"),
    (f"{CALL}.prompt_token_ids", [1, "2"]),
    (f"{CALL}.tokens_cut", "no"),
    (f"{TOOL}.name", None),
    (f"{TOOL}.call_id", 1),
    (f"{TOOL}.end_time", "later"),
    ("missing_steps", ["1"]),
    ("missing_steps", [-1]),
    ("lossy", {"steps[0].observation": 1}),
    ("scores", {"judge": "good"}),
]
#: Values the JSON Schema allows but nothing could write back, store or use: a number beyond
#: float64 or int64, NaN where JSON has no form for it, a malformed value encoding, an
#: encoded value of the wrong kind (attributes that decode to a tuple).
UNSAVABLE = [
    ("attributes", {"$tuple": [1]}),
    ("return", BIG),
    ("end_time", 2**64),
    ("steps[0].reward", BIG),
    ("steps[0].observation", {"$ndarray": {"dtype": "<f4", "shape": [9], "data": [1]}}),
    (f"{CALL}.input_messages", {"$bytes": "!!not base64"}),
    (f"{CALL}.completion_logprobs", [-0.5, NAN]),
    ("scores", {"judge": NAN}),
]


def _id(case: tuple[str, Any]) -> str:
    field, value = case
    return f"{field}={type(value).__name__}"


@pytest.mark.parametrize(
    "case", VIOLATIONS + UNSAVABLE, ids=[_id(case) for case in VIOLATIONS + UNSAVABLE]
)
def test_each_violation_is_reported_with_file_line_and_field(written, tmp_path, case):
    lines, originals = written
    field, value = case
    document = mutated(lines[2], field, value)
    assert VALIDATOR.is_valid(document) is (case in UNSAVABLE)
    path = bad_file(tmp_path, lines, document)
    errors: list[TrajectoryLoadError] = []
    assert load_trajectories(path, on_error=errors.append) == originals[:2]
    assert len(errors) == 1, errors
    (error,) = errors
    assert (error.path, error.line, error.torn) == (str(path), 2, False)
    assert error.field is not None and error.field.startswith(field), error
    assert str(error).startswith(f"{path}:2: ")
    assert error.field in error.message
    inspect_ok(path)
    _, _, err = inspect(str(path))
    assert "1 bad record skipped:" in err and f"{path}:2: " in err
    # The same document through from_dict says the same.
    with pytest.raises(TrajectoryFormatError) as raised:
        Trajectory.from_dict(document)
    assert raised.value.field == error.field


def test_messages_say_what_was_expected_and_what_was_found(written, tmp_path):
    lines, _ = written
    episode = json.loads(lines[2])["episode_id"]
    expected = {
        ("length", "5"): "length: expected an integer >= 0, got the string '5'",
        ("length", NAN): "length: expected an integer >= 0, got NaN",
        ("return", BIG): "return: expected a number within the float64 range, got an integer "
        "of about 401 digits",
        ("status", 3): "status: expected a string, got the integer 3",
        (f"{CALL}.finish_reasons", 3): f"{CALL}.finish_reasons: expected a list of strings or "
        "null, got the integer 3",
        ("steps[0].index", "0"): "steps[0].index: expected an integer >= 0, got the string '0'",
    }
    for (field, value), said in expected.items():
        errors: list[TrajectoryLoadError] = []
        path = bad_file(tmp_path, lines, mutated(lines[2], field, value))
        load_trajectories(path, on_error=errors.append)
        assert [error.message for error in errors] == [f"episode {episode!r}: {said}"]
    errors = []
    load_trajectories(
        bad_file(tmp_path, lines, mutated(lines[2], "episode_id", ["x"])), on_error=errors.append
    )
    assert errors[0].message == "episode_id: expected a string, got the list ['x']"


def test_what_the_tester_found_no_longer_crashes_inspect(written, tmp_path):
    """A return of 10^400, a length of "5", an integer status and a finish reason that is an
    integer: each record is listed as skipped, the rest summarised and shown."""
    lines, _ = written
    bad = [
        mutated(lines[0], "return", BIG),
        mutated(lines[0], "length", "5"),
        mutated(lines[1], "status", 3),
        mutated(lines[1], f"{CALL}.finish_reasons", 3),
    ]
    path = write_lines(tmp_path / "t.jsonl", lines[2], *(json.dumps(doc) for doc in bad), lines[0])
    code, out, err = inspect(str(path))
    assert code == 0, err
    assert "2 episodes from" in out
    assert "4 bad records skipped:" in err
    for line, field in ((2, "return"), (3, "length"), (4, "status"), (5, CALL)):
        assert re.search(
            rf"{re.escape(str(path))}:{line}: episode '[0-9a-f]+': {re.escape(field)}", err
        )
    code, out, err = inspect(str(path), "--worst", "1")
    assert code == 0 and "episode " in out


# --- what is coerced, and what is kept as written ---------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "loaded"),
    [
        ("length", 3.0, lambda t: t.length == 3 and type(t.length) is int),
        ("start_time", 1.5e18, lambda t: t.start_time == 1_500_000_000_000_000_000),
        ("steps[0].index", 0.0, lambda t: type(t.steps[0].index) is int),
        (f"{CALL}.input_tokens", 5.0, lambda t: t.steps[0].llm_calls[0].input_tokens == 5),
        ("missing_steps", [7.0], lambda t: t.missing_steps == [7]),
        ("error", {}, lambda t: t.error is None),
        ("attributes", None, lambda t: t.attributes == {}),
        ("steps[0].llm_calls", None, lambda t: t.steps[0].llm_calls == []),
        ("lossy", None, lambda t: t.lossy == {}),
        ("return", NAN, lambda t: math.isnan(t.return_)),  # the JSON literal NaN
        ("return", 5, lambda t: t.return_ == 5),
        ("steps[0].reward", -INF, lambda t: t.steps[0].reward == -INF),
        ("steps[0].reward", {"$float": "inf"}, lambda t: t.steps[0].reward == INF),
        ("status", "needs review", lambda t: t.status == "needs review"),
        ("schema", "agenttrace.trajectory/0", lambda t: t.schema == "agenttrace.trajectory/0"),
        ("episode_id", "a\ud800b", lambda t: t.episode_id == "a\ud800b"),
    ],
    ids=[
        "length-float",
        "time-float",
        "index-float",
        "tokens-float",
        "missing-floats",
        "error-empty",
        "attributes-null",
        "calls-null",
        "lossy-null",
        "return-NaN-literal",
        "return-int",
        "reward-minus-Infinity",
        "reward-tagged",
        "status-unknown",
        "schema-older",
        "id-lone-surrogate",
    ],
)
def test_what_is_coerced_or_kept_loads_and_saves(written, tmp_path, field, value, loaded):
    lines, originals = written
    path = bad_file(tmp_path, lines, mutated(lines[2], field, value))
    result = load_trajectories(path, on_error=_strict)
    assert result[0] == originals[0] and result[2] == originals[1]
    assert loaded(result[1])
    saved_and_summarised(result[1], tmp_path)
    inspect_ok(path)


def test_a_float_literal_beyond_float64_is_read_as_infinity(written, tmp_path):
    """1e400 (a float literal) is infinity to the JSON reader; 10^400 (an integer) is not a
    float64 and is a violation (above)."""
    lines, _ = written
    text = re.sub(r'"return":[^,]+', '"return":1e400', lines[2], count=1)
    path = write_lines(tmp_path / "t.jsonl", text)
    (trajectory,) = load_trajectories(path, on_error=_strict)
    assert trajectory.return_ == INF
    saved_and_summarised(trajectory, tmp_path)


# --- lone surrogates and nesting past the recursion limit -------------------------------------


def test_lone_surrogates_load_save_and_print_as_escapes(written, tmp_path):
    lines, originals = written
    document = json.loads(lines[0])
    document["episode_id"] = "ep-\ud800"
    document["status"] = "odd\udcff"
    document["task_id"] = "t\udfff"
    document["steps"][0]["observation"] = "obs \ud800"
    document["steps"][0]["error"] = "ValueError: \udc80"
    document["steps"][0]["llm_calls"][0]["input_messages"][0]["content"] = "hi \ud83d"
    document["steps"][0]["tool_calls"][0]["name"] = "calc\ud800"
    document["lossy"] = {"steps[0].observation": "cut \ud800"}
    path = write_lines(tmp_path / "s.jsonl", json.dumps(document), lines[1])
    loaded = load_trajectories(path, on_error=_strict)
    assert loaded[1] == originals[1]
    odd = loaded[0]
    assert odd.episode_id == "ep-\ud800" and odd.steps[0].observation == "obs \ud800"
    saved_and_summarised(odd, tmp_path)
    # The JSONL sink writes the escape, which reads back as the same text.
    assert load_trajectories(tmp_path / "resaved", on_error=_strict) == [odd]
    with pytest.raises(ValueError, match="cannot be stored in Parquet"):
        ParquetSink(tmp_path / "pq").write(odd)  # Arrow strings are UTF-8 (see above)
    code, out, err = inspect(str(path))
    assert code == 0, err
    assert "odd\\udcff" in out  # the status, escaped
    code, out, err = inspect(str(path), "--episode", "ep-\ud800")
    assert code == 0, err
    for shown in ("ep-\\ud800", "obs \\ud800", "ValueError: \\udc80", "calc\\ud800", "hi \\ud83d"):
        assert shown in out, shown
    code, out, err = inspect(str(path), "--worst", "2", "--json")
    assert code == 0, err
    assert any(Trajectory.from_json(line) == odd for line in out.splitlines())


@pytest.mark.parametrize("depth", [700, 5_000, 200_000])
def test_deep_nesting_costs_its_own_record_only(written, tmp_path, depth):
    """Nesting past what json or the codec can follow fails that record alone, with the
    reason (or loads, where the codec keeps deep values): the other records all load."""
    lines, originals = written
    deep = "[" * depth + "]" * depth
    text = lines[2].replace('"final_observation":', '"final_observation":' + deep + ',"_x":', 1)
    path = write_lines(tmp_path / "deep.jsonl", lines[0], text, lines[1])
    errors: list[TrajectoryLoadError] = []
    loaded = load_trajectories(path, on_error=errors.append)
    assert loaded[0] == originals[0] and loaded[-1] == originals[1]
    if len(loaded) == 2:
        (error,) = errors
        assert error.line == 2 and "nested too deeply" in error.message
        assert error.field in (None, "final_observation")
    else:
        assert errors == []
        saved_and_summarised(loaded[1], tmp_path)
    inspect_ok(path)


# --- the other loaders: Parquet read-back, JSON files -----------------------------------------


def test_parquet_rows_report_the_field(written, tmp_path):
    _, originals = written
    rows = [trajectory_to_row(t) for t in originals]
    rows[1]["attributes"] = "[1, 2]"
    rows[2]["steps"][0]["llm_calls"] = json.dumps([{"name": 5}])
    rows.append({**rows[0], "final_observation": "[" * 100_000 + "]" * 100_000})
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)
    errors: list[TrajectoryLoadError] = []
    assert load_trajectories(path, on_error=errors.append) == originals[:1]
    assert [(error.line, error.field) for error in errors] == [
        (1, "attributes"),
        (2, "steps[0].llm_calls[0].name"),
        (3, "final_observation"),
    ]
    assert str(errors[0]).startswith(f"{path}: row 1: episode ")
    assert "nested too deeply" in errors[2].message


def test_json_files_report_the_item_and_field(written, tmp_path):
    lines, originals = written
    bad = mutated(lines[1], "length", "5")
    (tmp_path / "list.json").write_text(
        json.dumps([json.loads(lines[0]), bad, json.loads(lines[2])]), encoding="utf-8"
    )
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    errors: list[TrajectoryLoadError] = []
    loaded = load_trajectories(
        [tmp_path / "list.json", tmp_path / "deep.json"], on_error=errors.append
    )
    assert loaded == [originals[0], originals[2]]
    assert errors[0].field == "length" and errors[0].message.startswith("item 1: episode ")
    assert errors[1].path == str(tmp_path / "deep.json") and "nested too deeply" in str(errors[1])


# --- any mutation: a property ----------------------------------------------------------------


def _paths(document: dict) -> list[str]:
    """Every field of the first step, its first calls, and the episode's own."""
    paths = [key for key in document if key != "steps"] + ["steps", "steps[0]"]
    paths += ["error.type", "error.message"] if document["error"] else []
    step = document["steps"][0]
    paths += [f"steps[0].{key}" for key in step]
    for kind in ("llm_calls", "tool_calls"):
        paths.append(f"steps[0].{kind}[0]")
        paths += [f"steps[0].{kind}[0].{key}" for key in step[kind][0]]
    return paths


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 3, -1, 2**63, 2**64, BIG, -BIG]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 3.0, 1.5e18, 2.5]),
    st.text(max_size=8),
    st.sampled_from(["5", "stop", "completed", "\ud800", "0" * 32, "agenttrace.trajectory/1"]),
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["$float", "$tuple", "name", "index", "a"]), inner, max_size=2
        ),
        st.sampled_from([{"$float": "nan"}, {"$float": "inf"}, {"$ndarray": 1}, {}]),
    ),
    max_leaves=6,
)


def _lenient(path: str, value: Any) -> bool:
    """Values outside the JSON Schema the loader takes on purpose (docs: Validation): any
    status string, null for an absent object or list, an older schema version, and objects
    that leave keys out (those take their defaults)."""
    last = _keys(path)[-1]
    if path == "status":
        return type(value) is str
    if path == "schema":
        return type(value) is str and value in (
            "agenttrace.trajectory/0",
            "agenttrace.trajectory/1",
        )
    optional = ("attributes", "llm_calls", "tool_calls", "missing_steps", "lossy", "scores")
    if value is None and last in (*optional, "tokens_cut", "completion_logprobs"):
        return True
    if last in ("prompt_token_ids", "completion_token_ids") and value is None:
        return True
    containers = ("error", "steps", "steps[0]", "steps[0].llm_calls", "steps[0].tool_calls")
    return path in (*containers, CALL, TOOL)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_mutation_loads_or_is_reported_and_what_loads_saves(written, tmp_path_factory, data):
    lines, originals = written
    which = data.draw(st.integers(0, 2), label="record")
    base = json.loads(lines[which])
    path = data.draw(st.sampled_from(_paths(base)), label="field")
    value = data.draw(_values, label="value")
    document = mutated(lines[which], path, value)
    folder = tmp_path_factory.mktemp("prop", numbered=True)
    others = [line for number, line in enumerate(lines) if number != which]
    file = write_lines(
        folder / "t.jsonl", others[0], json.dumps(document, allow_nan=True), others[1]
    )
    errors: list[TrajectoryLoadError] = []
    loaded = load_trajectories(file, on_error=errors.append)  # never raises
    good = [t for number, t in enumerate(originals) if number != which]
    assert [loaded[0], loaded[-1]] == good
    if len(loaded) == 2:  # reported, with the field
        (error,) = errors
        assert error.line == 2 and error.field is not None
        assert error.field.startswith(path), (path, error)
        assert error.field in error.message
        printable(str(error)).encode("utf-8")  # inspect prints it so
        return  # (inspect on the two good records left: the tests above)
    assert errors == [] and len(loaded) == 3
    assert VALIDATOR.is_valid(document) or _lenient(path, value), (
        "a schema violation loaded without a report",
        path,
        value,
    )
    saved_and_summarised(loaded[1], folder, show=False)
    inspect_ok(file)

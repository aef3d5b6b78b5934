"""``agenttrace export``: sources, filters, formats, and what it says when input is bad."""

from __future__ import annotations

import gzip
import json
import shlex
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from backend_servers import BackendServer, jaeger_v3_route, tempo_route
from conftest import SERVICE, TOKEN, assert_same_episodes, exported

from agenttrace import semconv as sc
from agenttrace.cli import export as export_command
from agenttrace.cli.main import main
from agenttrace.sinks import load_trajectories
from agenttrace.trajectory.model import Trajectory

EPISODES = 12


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, list[Trajectory]]:
    """A demo run: (its span file, its live trajectories)."""
    out = tmp_path_factory.mktemp("demo")
    args = ["demo", "-n", str(EPISODES), "-k", "4", "--out", str(out), "--run-name", "r"]
    assert main([*args, "--seed", "5"]) == 0
    run_dir = out / "r"
    return run_dir / "spans.jsonl", load_trajectories(run_dir / "trajectories.jsonl")


def export(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["export", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- what comes out ---------------------------------------------------------------------------


def test_export_equals_the_live_run_in_every_output_format(demo_run, tmp_path) -> None:
    spans, live = demo_run
    for name in ("t.jsonl", "t.jsonl.gz", "t.parquet"):
        assert_same_episodes(live, exported(str(spans), tmp_path / name))
    with gzip.open(tmp_path / "t.jsonl.gz", "rt") as handle:
        assert sum(1 for _ in handle) == EPISODES


def test_summary_names_source_counts_and_output(demo_run, tmp_path, capsys) -> None:
    spans, live = demo_run
    target = tmp_path / "t.jsonl"
    code, out, err = export(capsys, "--from", str(spans), "--out", str(target))
    assert code == 0, err
    assert f"from {spans} (1 file)" in out
    assert f"wrote {EPISODES} episodes to {target}" in out
    statuses = sorted({t.status for t in live})
    assert all(f"{status} " in out for status in statuses)
    assert not list(tmp_path.glob(".*partial")), "the partial file was renamed into place"


def test_chat_rows_are_the_model_calls_with_reward_columns(demo_run, tmp_path) -> None:
    spans, live = demo_run
    target = tmp_path / "chat.jsonl"
    assert main(["export", "--from", str(spans), "--out", str(target), "--format", "chat"]) == 0
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    expected = [
        (t, step, number, call)
        for t in live
        for step in t.steps
        for number, call in enumerate(step.llm_calls)
    ]
    assert len(rows) == len(expected) > 0
    by_key = {(r["episode_id"], r["step"], r["call"]): r for r in rows}
    for trajectory, step, number, call in expected:
        row = by_key[(trajectory.episode_id, step.index, number)]
        assert row["messages"] == call.input_messages + call.output_messages
        assert row["messages"][-1]["role"] == "assistant"
        assert row["reward"] == step.reward and row["return"] == trajectory.return_
        assert row["status"] == trajectory.status and row["model"] == call.model
        assert row["lossy"] is False

    parquet = tmp_path / "chat.parquet"
    assert main(["export", "--from", str(spans), "--out", str(parquet), "--format", "chat"]) == 0
    table = pq.read_table(parquet).to_pylist()
    assert len(table) == len(rows)
    for row, json_row in zip(table, rows, strict=True):
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in json_row["messages"]]
        assert [m["content"] for m in row["messages"]] == [
            m.get("content") for m in json_row["messages"]
        ]
        assert row["reward"] == json_row["reward"] and row["episode_id"] == json_row["episode_id"]


def test_rl_episodes_give_no_chat_rows_and_the_summary_says_so(cartpole_run, tmp_path, capsys):
    live, records = cartpole_run
    from agenttrace.storage import encode_lines

    spans = tmp_path / "spans.jsonl"
    spans.write_text(encode_lines(records))
    code, out, _ = export(
        capsys, "--from", str(spans), "--out", str(tmp_path / "c.jsonl"), "--format", "chat"
    )
    assert code == 0
    assert f"{len(live)} episodes had no model calls" in out
    assert (tmp_path / "c.jsonl").read_text() == ""


# --- filters ----------------------------------------------------------------------------------


def _ids(path: Path) -> set[str]:
    return {t.episode_id for t in load_trajectories(path)}


def test_filters_by_status_return_episode_and_time(demo_run, tmp_path, capsys) -> None:
    spans, live = demo_run
    source = ["--from", str(spans)]

    def ids(*options: str) -> set[str]:
        target = tmp_path / f"f{len(list(tmp_path.iterdir()))}.jsonl"
        code, _, err = export(capsys, *source, "--out", str(target), *options)
        assert code == 0, err
        return _ids(target)

    statuses = {t.status for t in live}
    assert len(statuses) > 1, "the demo run has episodes of several statuses"
    for status in statuses:
        assert ids("--status", status) == {t.episode_id for t in live if t.status == status}
    two = sorted(statuses)[:2]
    assert ids("--status", ",".join(two)) == {t.episode_id for t in live if t.status in two}

    returns = sorted(t.return_ for t in live)
    middle = returns[len(returns) // 2]
    assert ids("--min-return", str(middle)) == {t.episode_id for t in live if t.return_ >= middle}
    assert ids("--max-return", str(middle)) == {t.episode_id for t in live if t.return_ <= middle}

    chosen = [live[0].episode_id, live[3].episode_id]
    assert ids("--episode", chosen[0], "--episode", chosen[1]) == set(chosen)
    id_file = tmp_path / "ids.txt"
    id_file.write_text("\n".join(chosen) + "\n\n")
    assert ids("--episode", f"@{id_file}") == set(chosen)

    starts = sorted(t.start_time for t in live)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    cut = epoch + timedelta(microseconds=starts[len(starts) // 2] // 1000)
    later = {t.episode_id for t in live if t.start_time >= starts[len(starts) // 2]}
    assert ids("--since", cut.isoformat()) == later
    assert ids("--until", cut.isoformat()) == {t.episode_id for t in live} - later
    assert ids("--since", "1h") == {t.episode_id for t in live}
    assert ids("--until", "1h") == set()

    assert ids("--service", "agenttrace") == {t.episode_id for t in live}
    assert ids("--service", "someone-else") == set()


def test_filtered_out_episodes_are_counted_in_the_summary(demo_run, tmp_path, capsys) -> None:
    spans, live = demo_run
    code, out, _ = export(
        capsys, "--from", str(spans), "--out", str(tmp_path / "x.jsonl"), "--service", "nobody"
    )
    assert code == 0
    assert f"left out by filters: service {len(live)}" in out


# --- backends ---------------------------------------------------------------------------------


@pytest.fixture
def serve():
    servers: list[BackendServer] = []

    def start(route) -> BackendServer:
        servers.append(BackendServer(route))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_jaeger_and_tempo_sources_pass_service_window_and_token(
    cartpole_run, serve, tmp_path, monkeypatch
) -> None:
    live, records = cartpole_run
    monkeypatch.setenv("AGENTTRACE_EXPORT_TOKEN", TOKEN)
    since = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat()
    jaeger = serve(jaeger_v3_route(records))
    url = jaeger.url.replace("http://", "jaeger+http://")
    got = exported(url, tmp_path / "j.jsonl", "--service", SERVICE, "--since", since)
    assert_same_episodes(live, got)
    (request,) = jaeger.requests
    assert request["query"]["query.service_name"] == [SERVICE]
    assert request["headers"]["authorization"] == f"Bearer {TOKEN}"

    tempo = serve(tempo_route(records))
    url = tempo.url.replace("http://", "tempo+http://")
    got = exported(url, tmp_path / "t.jsonl", "--service", SERVICE, "--header", "X-Scope-OrgID=rl")
    assert_same_episodes(live, got)
    search = tempo.requests[0]
    assert SERVICE in search["query"]["q"][0]
    assert search["headers"]["x-scope-orgid"] == "rl"


def test_a_backend_that_fails_exits_1_without_the_token(serve, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AGENTTRACE_EXPORT_TOKEN", TOKEN)
    server = serve(lambda path, query: (500, {"error": "storage is down"}))
    target = tmp_path / "x.jsonl"
    url = server.url.replace("http://", "tempo+http://")
    code, out, err = export(capsys, "--from", url, "--out", str(target))
    assert code == 1
    assert "500" in err and "storage is down" in err
    assert TOKEN not in out + err
    assert not target.exists() and not list(tmp_path.iterdir())


# --- bad input and arguments ------------------------------------------------------------------


def test_bad_lines_are_reported_and_the_good_episodes_still_exported(demo_run, tmp_path, capsys):
    spans, live = demo_run
    lines = spans.read_text().splitlines(keepends=True)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("".join([lines[0], "{not json\n", *lines[1:], '{"resourceSpans": 7}\n']))
    target = tmp_path / "x.jsonl"
    code, _, err = export(capsys, "--from", str(damaged), "--out", str(target))
    assert code == 0
    assert "2 unreadable records skipped" in err
    assert f"{damaged}:2:" in err
    assert_same_episodes(live, load_trajectories(target))


def test_a_source_with_nothing_readable_exits_1(tmp_path, capsys) -> None:
    garbage = tmp_path / "spans.jsonl"
    garbage.write_text("{not json\n[1, 2]\n")
    code, _, err = export(capsys, "--from", str(garbage), "--out", str(tmp_path / "x.jsonl"))
    assert code == 1
    assert "2 unreadable records skipped" in err
    assert "every record was unreadable; no output written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spans.jsonl"]  # no empty x.jsonl


# --- a failed export leaves nothing behind ----------------------------------------------------


def _names(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet"])
def test_a_source_without_spans_fails_and_writes_nothing(tmp_path, capsys, suffix) -> None:
    (tmp_path / "spans.jsonl").write_text("")
    target = tmp_path / "new" / "deeper" / f"x{suffix}"
    code, out, err = export(capsys, "--from", str(tmp_path / "spans.jsonl"), "--out", str(target))
    assert code == 1
    assert f"no spans in {tmp_path / 'spans.jsonl'} (1 file); no output written" in err
    assert out == ""
    assert _names(tmp_path) == ["spans.jsonl"]  # neither the file nor its new folders


def test_spans_of_no_episode_fail_and_write_nothing(tmp_path, capsys) -> None:
    """Good OTLP spans of some web service: nothing an episode could be rebuilt from."""
    spans = [
        {
            "traceId": f"{n + 1:032x}",
            "spanId": f"{n + 1:016x}",
            "name": "GET /",
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
        }
        for n in range(5)
    ]
    line = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "spans.jsonl").write_text(json.dumps(line) + "\n")
    code, _, err = export(
        capsys, "--from", str(tmp_path / "spans.jsonl"), "--out", str(tmp_path / "x.jsonl")
    )
    assert code == 1
    assert "none of its 5 spans belongs to an agenttrace episode" in err
    assert _names(tmp_path) == ["spans.jsonl"]


def test_a_failed_export_never_touches_a_file_that_was_there(demo_run, tmp_path, capsys):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("{not json\n")
    target = tmp_path / "x.jsonl"
    target.write_text("precious\n")
    code, _, _ = export(capsys, "--from", str(garbage), "--out", str(target), "--force")
    assert code == 1
    assert target.read_text() == "precious\n"
    assert _names(tmp_path) == ["garbage.jsonl", "x.jsonl"]


def test_a_reader_that_aborts_leaves_no_output(tmp_path, capsys, monkeypatch) -> None:
    """zstd spans without the zstandard package: the read stops with the install hint."""
    from agenttrace.storage.otlp_proto import ZSTD_MAGIC

    (tmp_path / "spans.pb.zst").write_bytes(ZSTD_MAGIC + b"\x00" * 60)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now fails
    target = tmp_path / "out" / "x.jsonl"
    code, _, err = export(capsys, "--from", str(tmp_path / "spans.pb.zst"), "--out", str(target))
    assert code == 1
    assert "pip install -e '.[zstd]' from a clone" in err
    assert "Traceback" not in err
    assert _names(tmp_path) == ["spans.pb.zst"]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, OSError])
def test_an_export_stopped_midway_leaves_no_output(
    demo_run, tmp_path, capsys, monkeypatch, interruption
) -> None:
    """Ctrl-C, or a read error, after some episodes were already written to the output."""
    spans, _ = demo_run
    written: list[str] = []
    real_emitter = export_command.emitter

    def emitter(*args):
        emit = real_emitter(*args)

        def stopping(trajectory):
            emit(trajectory)
            written.append(trajectory.episode_id)
            if len(written) == 3:
                raise interruption(5, "Input/output error")

        return stopping

    monkeypatch.setattr(export_command, "emitter", emitter)
    target = tmp_path / "new" / "x.jsonl"
    code, _, err = export(capsys, "--from", str(spans), "--out", str(target))
    assert len(written) == 3
    if interruption is KeyboardInterrupt:
        assert code == 130 and "interrupted; no output file written" in err
    else:
        assert code == 1 and "Input/output error; no output written" in err
    assert _names(tmp_path) == []


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--from", "{tmp}/missing.jsonl", "--out", "{tmp}/x.jsonl"], 1, "no such span file"),
        (["--from", "{tmp}/nothing*", "--out", "{tmp}/x.jsonl"], 1, "no span files match"),
        (["--from", "http://host:16686", "--out", "{tmp}/x.jsonl"], 2, "unknown source"),
        (["--from", "jaeger+http://h:1", "--out", "{tmp}/x.jsonl"], 2, "needs --service"),
        (["--from", "phoenix+http://h:6006", "--out", "{tmp}/x.jsonl"], 2, "names no project"),
        (["--from", "jaeger+ftp://h", "--out", "{tmp}/x.jsonl"], 2, "expected jaeger+http"),
        (["--from", "{spans}", "--out", "{tmp}/x.csv"], 2, "*.parquet"),
        (["--from", "{spans}", "--out", "{tmp}/x.jsonl", "--status", "won"], 2, "unknown status"),
        (["--from", "{spans}", "--out", "{tmp}/x.jsonl", "--since", "soon"], 2, "ISO 8601"),
        (["--from", "{spans}", "--out", "{tmp}/x.jsonl", "--grace", "-1"], 2, "0 or more"),
        (["--from", "{spans}", "--out", "{tmp}/x.jsonl", "--header", "novalue"], 2, "key=value"),
    ],
)
def test_bad_arguments_name_the_problem(demo_run, tmp_path, capsys, argv, code, message):
    spans, _ = demo_run
    filled = [a.format(tmp=tmp_path, spans=spans) for a in argv]
    got, out, err = export(capsys, *filled)
    assert got == code
    assert message in out + err
    assert not (tmp_path / "x.jsonl").exists()


def test_an_existing_output_is_replaced_only_with_force(demo_run, tmp_path, capsys) -> None:
    spans, live = demo_run
    target = tmp_path / "x.jsonl"
    target.write_text("precious\n")
    code, _, err = export(capsys, "--from", str(spans), "--out", str(target))
    assert code == 2 and "--force" in err
    assert target.read_text() == "precious\n"
    code, _, _ = export(capsys, "--from", str(spans), "--out", str(target), "--force")
    assert code == 0
    assert_same_episodes(live, load_trajectories(target))


def test_late_spans_are_reported_with_the_grace_hint(cartpole_run, tmp_path, capsys) -> None:
    """Spans of one episode split over two files read one after the other."""
    live, records = cartpole_run
    from agenttrace.storage import encode_lines

    first = live[0].episode_id
    steps = [r for r in records if r.name == sc.ENV_STEP and r.attributes[sc.EPISODE_ID] == first]
    rest = [r for r in records if r not in steps]
    (tmp_path / "spans.jsonl").write_text(encode_lines(rest))
    (tmp_path / "spans-00001.jsonl").write_text(encode_lines(steps))
    code, out, _ = export(
        capsys, "--from", str(tmp_path), "--out", str(tmp_path / "x.jsonl"), "--grace", "0"
    )
    assert code == 0
    assert f"{len(steps)} spans arrived after their episode was written" in out
    assert "--grace" in out
    assert_same_episodes(live, exported(str(tmp_path), tmp_path / "y.jsonl", "--grace", "all"))


def test_an_install_hint_in_an_error_prints_literally(demo_run, tmp_path, capsys, monkeypatch):
    spans, _ = demo_run
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, out, err = export(capsys, "--from", str(spans), "--out", str(tmp_path / "t.parquet"))
    assert code == 1
    assert "missing optional package pyarrow (the 'parquet' extra)" in err
    assert "pip install 'pyarrow>=16', or from a clone of the repository: " in err
    assert "pip install -e '.[parquet]'" in err  # (literally: no markup ate the brackets)
    assert out == "" and list(tmp_path.iterdir()) == []


# --- help -------------------------------------------------------------------------------------


def test_help_explains_every_source_form_with_a_whole_example(capsys, monkeypatch) -> None:
    from agenttrace.cli.main import build_parser
    from agenttrace.storage.sources import SourceOptions, open_source

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["export", "--help"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) < 80
    for form in (
        "a span file, a folder (its span files) or a glob",
        "jaeger+http://HOST:16686",
        "tempo+http://HOST:3200",
        "phoenix+http://HOST:6006/PROJECT",
    ):
        assert f"\n\n  {form}" in text, form  # each form heads its own paragraph
    examples = [line.strip() for line in text.splitlines() if line.startswith("        --from ")]
    schemes = {example.split()[1].partition("+")[0] for example in examples}
    assert {"jaeger", "tempo", "phoenix"} <= schemes
    assert len(examples) >= 6
    # Every example is a valid command line, and every backend example a source export reads.
    for example in examples:
        args = build_parser().parse_args(["export", *shlex.split(example), "--out", "t.jsonl"])
        if "+http" in args.source:
            source = open_source(args.source, SourceOptions(service=args.service))
            assert source.description
    for option in ("--service", "--since", "--until", "--query", "--header"):
        assert option in text[text.index("SOURCE (--from)") :]
    assert "--from SOURCE         where the spans are: span file, folder or glob;" in text

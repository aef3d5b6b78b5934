"""``agenttrace export --engine ray``: the rebuild on Ray Data equals the one-process export.

Real parts throughout. A CartPole run recorded with agenttrace: a single env whose loop keeps
its own record of each episode (length, return), a score given after each third episode (a
``score`` span in a trace of its own), and a vector env, whose every step is one span for
three episodes that each live in a trace of their own. That run is copied under fresh trace
and episode ids to over 100,000 spans, interleaved as four processes' exporters would write
them (120 spans each in turn), in batches of 50 spans a line (most lines of one trace, some of
several), cut into 24 files at line boundaries (so episodes are split across files) and, by
``--chunk-bytes``, into pieces of files. Ray is a local Ray of two CPUs,
started once for the module, as ``ray.init(num_cpus=2)`` starts it.

Each export on Ray is compared with the local export of the same input, episode by episode and
field by field (``values_equal`` of the trajectories' dicts, as the loaders read them back, late
scores merged), and each CartPole episode with what the loop itself recorded.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import fsspec
import gymnasium as gym
import numpy as np
import psutil
import pytest
import ray

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.instrument.vector import TracedVectorEnv
from agenttrace.reading import load_trajectories, read_step_tables
from agenttrace.storage import encode_lines, read_otlp_json
from agenttrace.storage.errors import SpanFormatError
from agenttrace.storage.otlp_json_lines import line_records
from agenttrace.storage.otlp_json_route import line_places
from agenttrace.storage.span_chunks import ChunkReader, plan_chunks
from agenttrace.trajectory.equality import values_equal
from agenttrace.trajectory.records import SpanLink, SpanRecord

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

SINGLE_EPISODES = 12
COPIES = 12  # of the seed run (about 9,800 spans each)
FILES = 24
SPANS_PER_LINE = 50
WAVE = 4  # copies written at the same time, as by four processes
RUN = 120  # spans each of them writes in turn


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


# --- the input ----------------------------------------------------------------------------------


def play(folder: Path) -> tuple[Path, dict[str, tuple[int, float]], dict[str, float]]:
    """The seed run: its span file, the loop's record (episode id -> length, return) and the
    scores it gave (episode id -> value)."""
    runtime = at.configure(out=str(folder), run_name="seed", sinks=(), exit_report=False)
    env = gym.make("CartPole-v1")
    record: dict[str, tuple[int, float]] = {}
    judged: dict[str, float] = {}
    for seed in range(SINGLE_EPISODES):
        episode_id = f"cartpole-{seed}"
        steps, total, done = 0, 0.0, False
        with at.episode(episode_id=episode_id, env=env, seed=seed, task_id="cartpole"):
            with at.env_reset() as reset:
                obs, _ = reset.record_result(env.reset(seed=seed))
            while not done:
                with at.timestep():
                    with at.agent_act() as act:
                        action = int(obs[2] + (0.5 * obs[3] if seed % 2 else 0) > 0)
                        act.record(observation=obs, action=action)
                    with at.env_step() as step:
                        obs, reward, end, cut, _ = step.record_result(env.step(action))
                steps, total, done = steps + 1, total + float(reward), end or cut
        record[episode_id] = (steps, total)
        if seed % 3 == 0:  # after the episode: a score span in a trace of its own
            judged[episode_id] = seed / 10
            at.score(episode_id, seed / 10, name="judge")
    vector = TracedVectorEnv(gym.make_vec("CartPole-v1", num_envs=3))
    observations, _ = vector.reset(seed=100)
    for _ in range(80):
        observations, *_ = vector.step(np.array([int(o[2] > 0) for o in observations]))
    vector.close()
    at.shutdown()
    return runtime.span_paths[0], record, judged


def copy_of(record: SpanRecord, copy: int) -> SpanRecord:
    """The record as another run would have written it: other trace ids, other episode ids."""
    mask = copy * 0x9E3779B97F4A7C15_2545F4914F6CDD1D & (1 << 128) - 1

    def renamed(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(f"{v}~{copy}" for v in value)
        return f"{value}~{copy}"

    attributes = dict(record.attributes)
    for key in (sc.EPISODE_ID, sc.VECTOR_EPISODE_IDS):
        if key in attributes:
            attributes[key] = renamed(attributes[key])
    links = tuple(SpanLink(ln.trace_id ^ mask, ln.span_id, ln.attributes) for ln in record.links)
    return record._replace(trace_id=record.trace_id ^ mask, attributes=attributes, links=links)


def write_input(seed: Path, folder: Path) -> int:
    """The seed run's spans copied COPIES times into FILES span files; returns the spans."""
    records = list(read_otlp_json(seed))
    order: list[SpanRecord] = []
    for wave in range(0, COPIES, WAVE):
        runs = [[copy_of(r, c) for r in records] for c in range(wave, min(COPIES, wave + WAVE))]
        for i in range(0, len(records), RUN):  # (most lines of one trace, some of several)
            order.extend(record for run in runs for record in run[i : i + RUN])
    lines = [
        encode_lines(order[i : i + SPANS_PER_LINE]) + "\n"
        for i in range(0, len(order), SPANS_PER_LINE)
    ]
    per_file = math.ceil(len(lines) / FILES)
    folder.mkdir()
    for n in range(FILES):
        text = "".join(lines[n * per_file : (n + 1) * per_file])
        (folder / f"spans-{n + 1:05d}.jsonl").write_text(text, encoding="utf-8")
    return len(order)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fleet")
    seed, record, judged = play(root / "seed")
    spans = write_input(seed, root / "spans")
    return {"root": root, "seed": seed, "spans": spans, "record": record, "judged": judged}


# --- helpers ------------------------------------------------------------------------------------


def _strict(error: SpanFormatError) -> None:
    raise error


def export(capsys: pytest.CaptureFixture, *args: str, code: int = 0) -> tuple[str, str]:
    status = main(["export", *args])
    out, err = capsys.readouterr()
    assert status == code, f"agenttrace export exited {status}:\n{out}\n{err}"
    return out, err


def both(
    capsys: pytest.CaptureFixture,
    folder: Path,
    source: str,
    suffix: str,
    *options: str,
    on_ray: tuple[str, ...] = (),
    ray_source: str | None = None,
    code: int = 0,
) -> tuple[tuple[str, str], tuple[str, str]]:
    """The local export to ``folder/local<suffix>``, then the export on Ray (with ``on_ray``
    options, from ``ray_source`` when given) to ``folder/ray<suffix>``: each one's stdout and
    stderr."""
    local_args = (*options, "--from", source, "--out", f"{folder}/local{suffix}")
    local = export(capsys, *local_args, code=code)
    ray_args = ("--engine", "ray", *on_ray, *options, "--from", ray_source or source)
    return local, export(capsys, *ray_args, "--out", f"{folder}/ray{suffix}", code=code)


def by_episode(source: Any) -> dict[str, at.Trajectory]:
    trajectories = load_trajectories(source)
    found = {t.episode_id: t for t in trajectories}
    assert len(found) == len(trajectories), "an episode was written twice"
    return found


def assert_same(local: dict[str, at.Trajectory], on_ray: dict[str, at.Trajectory]) -> None:
    assert on_ray.keys() == local.keys()
    for episode_id, trajectory in local.items():
        assert values_equal(on_ray[episode_id].to_dict(), trajectory.to_dict()), episode_id


def summary_line(out: str, start: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.strip().startswith(start))


# --- the tests ----------------------------------------------------------------------------------


def test_equal_to_the_local_export_over_many_files(fleet, tmp_path, capsys) -> None:
    """Over 100,000 spans in 24 files, cut into chunks of 256 KiB: the same episodes, field by
    field, as the local export; each CartPole episode's length, return and score those of the
    loop; the same summary."""
    source, record = str(fleet["root"] / "spans"), fleet["record"]
    assert fleet["spans"] > 100_000
    ray_options = ("--workers", "2", "--partitions", "6", "--chunk-bytes", "262144")
    (local_out, _), (ray_out, _) = both(capsys, tmp_path, source, ".jsonl", on_ray=ray_options)
    assert "arrived after" not in local_out  # (no span of the input is late)
    local, on_ray = by_episode(tmp_path / "local.jsonl"), by_episode(tmp_path / "ray.jsonl")
    assert_same(local, on_ray)

    single = {i: t for i, t in on_ray.items() if i.startswith("cartpole-")}
    assert len(single) == COPIES * SINGLE_EPISODES
    for episode_id, trajectory in single.items():
        seed_id = episode_id.split("~")[0]
        length, total = record[seed_id]
        assert (len(trajectory.steps), trajectory.return_) == (length, total), episode_id
        assert trajectory.scores.get("judge") == fleet["judged"].get(seed_id), episode_id
    vector = [t for i, t in on_ray.items() if not i.startswith("cartpole-")]
    assert len(vector) >= 3 * COPIES and any(len(t.steps) > 5 for t in vector)

    assert summary_line(ray_out, "read ").split(" in ")[0] == f"read {fleet['spans']:,} spans"
    assert summary_line(ray_out, "by status") == summary_line(local_out, "by status")
    assert "6 parts written, 2 workers" in ray_out
    parts = sorted(p.name for p in (tmp_path / "ray.jsonl").iterdir())
    assert parts == [f"part-{n:05d}.jsonl" for n in range(6)]  # (every score joined its episode)
    assert "came after" not in local_out
    assert not list(tmp_path.glob(".*")), "the shards and partial folders are removed"


def test_fsspec_url_to_parquet(fleet, tmp_path, capsys) -> None:
    """An fsspec URL (file://) of a glob, to Parquet parts: the same as the local export."""
    seed = fleet["seed"]
    url = f"file://{seed.parent}/spans*.jsonl"
    on_ray = ("--partitions", "3", "--chunk-bytes", "100000")
    _, (out, _) = both(capsys, tmp_path, str(seed), ".parquet", on_ray=on_ray, ray_source=url)
    assert url in out
    assert_same(by_episode([tmp_path / "local.parquet"]), by_episode(tmp_path / "ray.parquet"))
    assert {p.suffix for p in (tmp_path / "ray.parquet").iterdir()} <= {".parquet", ".jsonl"}


def test_step_tables(fleet, tmp_path, capsys) -> None:
    """--format steps makes one step-tables folder, every bucket's parts in it."""
    seed = str(fleet["seed"])
    both(capsys, tmp_path, seed, "", "--format", "steps", on_ray=("--partitions", "3"))
    for local, on_ray in zip(
        read_step_tables(tmp_path / "local"), read_step_tables(tmp_path / "ray"), strict=True
    ):
        key = ["episode_id", "index"] if "index" in local.column_names else ["episode_id"]
        rows = [sorted(t.to_pylist(), key=lambda r: [r[k] for k in key]) for t in (local, on_ray)]
        assert rows[0] == rows[1]
    assert len(list((tmp_path / "ray" / "steps").glob("steps-*.parquet"))) == 3


def test_tokens(tmp_path, capsys) -> None:
    """--format tokens: the same token rows as the local export."""
    runtime = at.configure(
        out=str(tmp_path / "run"), run_name="agent", sinks=(), exit_report=False, tokens=True
    )
    for episode in range(6):
        with at.episode(episode_id=f"agent-{episode}", task_id="count"):
            prompt = [1, 2, 3, episode]
            for turn in range(3):
                with at.timestep(), at.llm_call(model="tiny") as call:
                    completion = [100 + turn, 200 + episode]
                    call.record(
                        output_messages=[{"role": "assistant", "content": f"{turn}"}],
                        prompt_token_ids=prompt,
                        completion_token_ids=completion,
                        completion_logprobs=[-0.5, -0.25],
                    )
                    prompt = [*prompt, *completion, 7]
    at.shutdown()
    spans = str(runtime.span_paths[0])
    both(capsys, tmp_path, spans, ".jsonl", "--format", "tokens", on_ray=("--partitions", "3"))

    def rows(files: list[Path]) -> list[dict]:
        found = [json.loads(line) for path in files for line in path.read_text().splitlines()]
        return sorted(found, key=lambda row: row["episode_id"])

    local = rows([tmp_path / "local.jsonl"])
    assert len(local) == 6
    assert rows(sorted((tmp_path / "ray.jsonl").glob("part-*.jsonl"))) == local


def test_episodes_of_one_trace(tmp_path, capsys) -> None:
    """Episodes that share one trace (a driver's span over them all) are one part, rebuilt by
    one task as the local export rebuilds them; the summary says why it took one task."""
    runtime = at.configure(
        out=str(tmp_path / "run"), run_name="driver", sinks=(), exit_report=False
    )
    with runtime.tracer.start_as_current_span("train"):
        for seed in range(4):
            with at.episode(episode_id=f"one-trace-{seed}", task_id="count"):
                for _ in range(3):
                    with at.timestep(), at.env_step() as step:
                        step.record(reward=1.0)
    at.shutdown()
    spans = str(runtime.span_paths[0])
    _, (out, _) = both(capsys, tmp_path, spans, ".jsonl", on_ray=("--workers", "2"))
    assert "one part held 100% of the input" in out
    assert_same(by_episode(tmp_path / "local.jsonl"), by_episode(tmp_path / "ray.jsonl"))
    assert len(list((tmp_path / "ray.jsonl").iterdir())) == 1


def test_problems_named_at_their_file_and_line(fleet, tmp_path, capsys) -> None:
    """Problems in a file cut into chunks smaller than its lines are named at the same file
    and line as by the local export, whether the line was decoded where it was read (not
    JSON) or in its bucket (a reward that is a string), the torn last line too; exit 3."""
    lines = fleet["seed"].read_bytes().splitlines(keepends=True)
    reward = b'"rl.reward","value":{"doubleValue":1.0}'
    assert reward in lines[6]
    lines[6] = lines[6].replace(reward, b'"rl.reward","value":{"stringValue":"lots"}', 1)
    lines[2] = b'{"resourceSpans": [not json\n'
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"".join(lines))
    small = ("--chunk-bytes", "65536")
    local, on_ray = both(capsys, tmp_path, str(broken), ".jsonl", on_ray=small, code=3)
    local_err, ray_err = local[1], on_ray[1]
    named = [line for line in local_err.splitlines() if str(broken) in line]
    assert len(named) == 3
    for number, text in zip((3, len(lines), 7), named, strict=True):  # (unreadable first)
        assert text.strip().startswith(f"{broken}:{number}:"), text
    assert "torn last line" in named[1] and "'lots'" in named[2]
    assert [line for line in ray_err.splitlines() if str(broken) in line] == named
    assert_same(by_episode(tmp_path / "local.jsonl"), by_episode(tmp_path / "ray.jsonl"))


def test_lines_are_placed_as_the_decoder_reads_them(fleet) -> None:
    """The read stage's look at a line (no decoding) finds the traces and episode ids the
    decoder finds, and gives up on every line only decoding can place."""
    for number, line in enumerate(fleet["seed"].read_bytes().splitlines(keepends=True), 1):
        records = line_records(line, number, "seed", _strict, last=True)
        places = line_places(line)
        if any(r.name in (sc.SCORE, sc.ENV_VECTOR_STEP) for r in records):
            assert places is None
            continue
        assert places is not None and places.spans == len(records)
        assert places.traces == {r.trace_id for r in records}
        assert places.episodes == {r.attributes[sc.EPISODE_ID] for r in records}
    line = next(line for line in fleet["seed"].read_bytes().splitlines() if b'"timestep"' in line)
    trace_id = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    as_base64 = base64.b64encode(bytes.fromhex(trace_id)).decode().encode()
    for changed in (
        line.replace(trace_id.encode(), as_base64),  # (the decoder reads base64 ids too)
        line.replace(b'"scopeSpans"', b'"instrumentationLibrarySpans"'),
        line.replace(b'"resourceSpans"', b'"resource_spans"'),
        line.replace(b'"name":"timestep"', b'"name":"score"', 1),
        line[:-20],
    ):
        assert line_places(changed) is None


def test_span_files_on_another_filesystem(fleet, tmp_path, capsys) -> None:
    """A folder on a filesystem that is not this machine's (fsspec's memory://): its span
    files are found by their first bytes (the trajectories file beside them left out), a plain
    file is cut into ranges, a gzip file copied and read whole; the chunks hold every record."""
    memory = fsspec.filesystem("memory")
    data = fleet["seed"].read_bytes()
    export(capsys, "--from", str(fleet["seed"]), "--out", str(tmp_path / "t.jsonl"))
    memory.pipe("/run/spans-00001.jsonl", data)
    memory.pipe("/run/spans-00002.jsonl.gz", gzip.compress(data))
    memory.pipe("/run/trajectories.jsonl", (tmp_path / "t.jsonl").read_bytes())
    try:
        description, chunks = plan_chunks("memory:///run", 100_000)
        assert description == "memory:///run (2 files)"
        assert {c.url for c in chunks} == {
            "memory:///run/spans-00001.jsonl",
            "memory:///run/spans-00002.jsonl.gz",
        }
        assert [c.end is None for c in chunks].count(True) == 1 and len(chunks) > 3
        records = []
        for chunk in chunks:
            for line, item in ChunkReader(chunk, _strict):
                if type(item) is bytes:
                    item = line_records(item, line, chunk.name, _strict, last=True)
                records.extend(item)
        assert records == 2 * list(read_otlp_json(fleet["seed"]))
    finally:
        memory.rm("/run", recursive=True)


def test_output_folder_and_refusals(fleet, tmp_path, capsys) -> None:
    """What the Ray engine refuses, each said in one line; an existing output is replaced only
    with --force, and only a folder of parts."""
    seed, out = str(fleet["seed"]), str(tmp_path / "out.jsonl")
    for option, named in (
        (["--dedupe"], "--dedupe"),
        (["--group-complete"], "--group-complete"),
        (["--format", "minari", "--dataset-id", "a/b-v0"], "--format minari"),
    ):
        _, err = export(capsys, "--engine", "ray", *option, "--from", seed, "--out", out, code=2)
        assert f"--engine ray does not support {named}" in err
    _, err = export(
        capsys, "--engine", "ray", "--from", "tempo+http://127.0.0.1:1", "--out", out, code=2
    )
    assert "reading a trace backend" in err

    export(capsys, "--engine", "ray", "--partitions", "2", "--from", seed, "--out", out)
    _, err = export(capsys, "--engine", "ray", "--from", seed, "--out", out, code=2)
    assert "exists; use --force" in err
    export(capsys, "--engine", "ray", "--partitions", "3", "--force", "--from", seed, "--out", out)
    assert len(list(Path(out).glob("part-*.jsonl"))) == 3
    (Path(out) / "notes.txt").write_text("mine")
    _, err = export(capsys, "--engine", "ray", "--force", "--from", seed, "--out", out, code=2)
    assert "holds more than the parts of an export" in err


def test_without_ray(fleet, tmp_path, capsys, monkeypatch) -> None:
    """Without Ray installed, the error names the extra that brings it."""
    monkeypatch.setitem(sys.modules, "ray", None)
    out = str(tmp_path / "out.jsonl")
    _, err = export(capsys, "--engine", "ray", "--from", str(fleet["seed"]), "--out", out, code=1)
    assert "--engine ray needs Ray Data" in err and "[ray]" in err
    assert not Path(out).exists()


def test_command_line_starts_and_stops_its_own_ray(fleet, tmp_path, capsys) -> None:
    """As a user runs it, in a process of its own: the command starts a local Ray of
    --workers CPUs for the export, and stops it (no process of that Ray is left)."""
    seed, out = str(fleet["seed"]), tmp_path / "ray.jsonl"
    command = [sys.executable, "-m", "agenttrace", "export", "--engine", "ray", "--workers", "1",
               "--from", seed, "--out", str(out)]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as run:
        stdout, stderr = (text.decode() for text in run.communicate(timeout=240))
    assert run.returncode == 0, stderr
    assert "1 worker (Ray started in" in stdout
    session = f"_{run.pid}/"  # (Ray's session folder is named after the process that started it)

    def ray_left() -> bool:
        processes = psutil.process_iter(["cmdline"])
        return any(session in " ".join(p.info["cmdline"] or ()) for p in processes)

    deadline = time.monotonic() + 20
    while ray_left():
        assert time.monotonic() < deadline, "a process of the command's Ray is still running"
        time.sleep(0.5)
    export(capsys, "--from", seed, "--out", str(tmp_path / "local.jsonl"))
    assert_same(by_episode(tmp_path / "local.jsonl"), by_episode(out))

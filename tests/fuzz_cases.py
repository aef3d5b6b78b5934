"""Generated bad inputs, and what agenttrace does with each: the project's fuzz harness.

Two kinds of input, each a clean file with ONE line damaged by a seeded mutation:

* ``spans``: a 40-episode span file (``agenttrace demo``), read by ``agenttrace export``;
* ``trajectories``: its 40 trajectories (JSONL), read by ``load_trajectories``, then re-saved
  and summarised.

Mutations are byte-level (flips, cuts, deleted, doubled or joined lines, invalid UTF-8,
binary) and structural (a value, or an ``rl.*`` attribute, replaced by a hostile one: deep
nesting, 10^400, NaN, wrong types, lone surrogates, huge claims such as a length of 10^9).
Each case is classified as clean, clear error (a reported problem, no traceback), crash,
hang (past ``--timeout``), blow-up (past ``--memory`` MB), and separately whether a good
record was lost: an episode with no span (or line) in the damaged lines that is missing from
the output or differs from the clean run's.

On demand (documented in the README)::

    python tests/fuzz_cases.py --cases 10000

prints the table; tests/test_fuzz.py runs the same generators through hypothesis, bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import random
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPANS, TRAJECTORIES = "spans", "trajectories"
KINDS = (SPANS, TRAJECTORIES)
OUTCOMES = ("clean", "clear error", "crash", "hang", "blow-up")
EPISODES = 40

# --- hostile values ---------------------------------------------------------------------------


def deep_json(depth: int, rng: random.Random) -> str:
    """JSON text nested ``depth`` levels (lists or objects)."""
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


def deep_value(depth: int, rng: random.Random) -> Any:
    """A value nested ``depth`` levels, built without recursion."""
    value: Any = 1
    as_list = rng.random() < 0.5
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


def hostile_value(rng: random.Random) -> Any:
    """A JSON value chosen to break readers: wrong types, huge numbers, deep nesting."""
    choice = rng.randrange(16)
    if choice == 0:
        return int("1" + "0" * rng.choice((20, 308, 400, 4000)))
    if choice == 1:
        return rng.choice(["NaN", "Infinity", "-Infinity", "nan", "1e400"])
    if choice == 2:  # (deeper ones come as text, and as whole lines wrapped in brackets)
        return deep_value(rng.choice((50, 300, 800)), rng)
    if choice == 3:
        return deep_json(rng.choice((400, 1000, 3000)), rng)  # as text
    if choice == 4:
        return rng.choice(["lots", "", "5", "-1", "true", "\ud800", "\x00", "é" * 3])
    if choice == 5:
        return rng.choice([[], [1.0], ["a", 1, None], [[[]]]])
    if choice == 6:
        return rng.choice([{}, {"x": 1}, {"$float": "nan"}, {"$type": "os:system"}])
    if choice == 7:
        return rng.choice([True, False, None])
    if choice == 8:
        return rng.choice([-1, 0, 10**9, 2**63, -(2**63) - 1, 10**6])
    if choice == 9:
        return rng.choice([1e308, -1e308, 5e-324, 0.5])
    if choice == 10:
        return "x" * rng.choice((1000, 100_000, 2_000_000))
    if choice == 11:
        return rng.choice(["completed", "errored", "nope", "COMPLETED"])
    if choice == 12:
        return {"stringValue": deep_json(rng.choice((500, 2500)), rng)}
    if choice == 13:
        return {"intValue": str(rng.choice((10**9, 10**30, -5))) + rng.choice(["", "x"])}
    if choice == 14:
        return {"arrayValue": {"values": [{"doubleValue": "NaN"}] * rng.randrange(3)}}
    return {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": "x"}}]}}


# --- mutations --------------------------------------------------------------------------------

RL_KEYS = (
    "rl.reward",
    "rl.discount",
    "rl.episode.return",
    "rl.episode.length",
    "rl.episode.status",
    "rl.timestep.index",
    "rl.episode.id",
    "rl.done",
    "rl.terminated",
    "rl.observation",
    "rl.action",
    "rl.info",
)


def _paths(value: Any, prefix: tuple = (), limit: int = 4000) -> list[tuple]:
    """Paths to the values inside a parsed JSON document (bounded)."""
    found: list[tuple] = []
    stack = [(prefix, value)]
    while stack and len(found) < limit:
        path, item = stack.pop()
        found.append(path)
        if isinstance(item, dict):
            stack.extend(((*path, key), child) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend(((*path, index), child) for index, child in enumerate(item))
    return found


def _replace(document: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return document


def _dumps(document: Any) -> bytes:
    try:
        text = json.dumps(document, ensure_ascii=False, allow_nan=True)
    except (ValueError, RecursionError):
        text = json.dumps(document, ensure_ascii=True, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


def _set_attribute(document: Any, rng: random.Random) -> bool:
    """An rl.* attribute of a span in an OTLP/JSON document set to a hostile AnyValue."""
    spans = [
        span
        for resource_spans in document.get("resourceSpans") or []
        for scope in resource_spans.get("scopeSpans") or []
        for span in scope.get("spans") or []
    ]
    if not spans:
        return False
    span = rng.choice(spans)
    key = rng.choice(RL_KEYS)
    value = hostile_value(rng)
    if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)).endswith("Value")):
        kind = rng.choice(["stringValue", "intValue", "doubleValue", "boolValue"])
        value = {kind: value if kind != "stringValue" else json.dumps(value)}
    attributes = [a for a in span.get("attributes") or [] if a.get("key") != key]
    attributes.append({"key": key, "value": value})
    span["attributes"] = attributes
    return True


def mutate_line(line: bytes, rng: random.Random, kind: str) -> bytes:
    """One damaged line (structural or byte-level)."""
    choice = rng.randrange(10)
    if choice <= 5:
        try:
            document = json.loads(line)
        except ValueError:
            document = None
        if document is not None:
            if kind == SPANS and choice <= 2 and _set_attribute(document, rng):
                return _dumps(document)
            if choice == 3:
                depth = rng.choice((100, 450, 2000))
                return b"[" * depth + line + b"]" * depth
            path = rng.choice(_paths(document))
            return _dumps(_replace(document, path, hostile_value(rng)))
    if choice == 6:
        if not line:
            return line
        at = rng.randrange(len(line))
        return line[:at] + bytes([line[at] ^ (1 << rng.randrange(8))]) + line[at + 1 :]
    if choice == 7:
        return line[: rng.randrange(len(line) + 1)]
    if choice == 8:
        at = rng.randrange(len(line) + 1)
        return (
            line[:at] + rng.choice([b"\xff\xfe", b"\xc3", b"\x00\x01", b"\xed\xa0\x80"]) + line[at:]
        )
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


@dataclass
class Case:
    kind: str
    seed: int
    damaged: set[int]  # line numbers (0-based) of the clean file that the case damaged
    data: bytes  # the damaged file


def make_case(kind: str, seed: int, clean: bytes) -> Case:
    """The clean file with one line damaged (or deleted, doubled, joined) by ``seed``."""
    rng = random.Random(seed)
    lines = clean.splitlines(keepends=True)
    index = rng.randrange(len(lines))
    shape = rng.randrange(10)
    damaged = {index}
    if shape == 0:
        del lines[index]
    elif shape == 1:
        lines.insert(index, lines[index])  # a duplicate: nothing lost, nothing damaged
        damaged = set()
    elif shape == 2 and index + 1 < len(lines):
        lines[index] = lines[index].rstrip(b"\n") + lines.pop(index + 1)
        damaged = {index, index + 1}
    else:
        ending = b"\n" if lines[index].endswith(b"\n") else b""
        lines[index] = mutate_line(lines[index].rstrip(b"\n"), rng, kind) + ending
    return Case(kind, seed, damaged, b"".join(lines))


# --- the clean run ----------------------------------------------------------------------------


@dataclass(repr=False)
class CleanRun:
    spans: Path
    trajectories: Path
    #: per line of each file, the episode ids it holds
    span_line_episodes: list[set[str]]
    trajectory_line_episodes: list[set[str]]
    by_id: dict[str, str]  # episode id -> its clean trajectory as JSON text

    def __repr__(self) -> str:
        return f"CleanRun({self.spans.parent}, {len(self.by_id)} episodes)"


def make_clean_run(folder: Path) -> CleanRun:
    """A 40-episode demo run: its span file and trajectories, and which line holds what."""
    from agenttrace.cli.main import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["demo", "--episodes", str(EPISODES), "--out", str(folder), "--seed", "7"])
    assert code == 0, f"agenttrace demo exited {code}"
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    spans, trajectories = run / "spans.jsonl", run / "trajectories.jsonl"
    span_lines = [_episodes_in_span_line(line) for line in spans.read_bytes().splitlines()]
    by_id: dict[str, str] = {}
    trajectory_lines = []
    for line in trajectories.read_text().splitlines():
        episode_id = json.loads(line)["episode_id"]
        trajectory_lines.append({episode_id})
        by_id[episode_id] = line
    return CleanRun(spans, trajectories, span_lines, trajectory_lines, by_id)


def _episodes_in_span_line(line: bytes) -> set[str]:
    document = json.loads(line)
    found = set()
    for resource_spans in document.get("resourceSpans") or []:
        for scope in resource_spans.get("scopeSpans") or []:
            for span in scope.get("spans") or []:
                for attribute in span.get("attributes") or []:
                    if attribute.get("key") == "rl.episode.id":
                        found.add(attribute["value"].get("stringValue"))
    return found


# --- running one case -------------------------------------------------------------------------


@dataclass
class Result:
    kind: str
    seed: int
    outcome: str
    lost: int  # good episodes missing or changed
    detail: str = ""


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def run_case(case: Case, clean: CleanRun, workdir: Path, timeout: float) -> Result:
    """Feed the case to agenttrace; classify what happened."""
    from agenttrace.sinks import load_trajectories

    source = workdir / ("spans.jsonl" if case.kind == SPANS else "trajectories.jsonl")
    source.write_bytes(case.data)
    lines = clean.span_line_episodes if case.kind == SPANS else clean.trajectory_line_episodes
    touched = set().union(*(lines[i] for i in case.damaged)) if case.damaged else set()
    good = set(clean.by_id) - touched
    stderr = io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            if case.kind == SPANS:
                out = workdir / "out.jsonl"
                out.unlink(missing_ok=True)
                code = _export(source, out)
                got = load_trajectories(out) if out.exists() else []
            else:
                got, code = _load_resave_summarise(source, workdir)
    except _Timeout:
        return Result(case.kind, case.seed, "hang", len(good))
    except MemoryError:
        return Result(case.kind, case.seed, "blow-up", len(good))
    except RecursionError as error:
        return Result(case.kind, case.seed, "crash", len(good), f"RecursionError: {error}"[:200])
    except Exception as error:
        return Result(
            case.kind, case.seed, "crash", len(good), f"{type(error).__name__}: {error}"[:200]
        )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    text = stderr.getvalue()
    if "Traceback" in text:
        outcome = "crash"
    elif code == 0 and not text.strip():
        outcome = "clean"
    else:
        outcome = "clear error" if text.strip() else "crash"
    got_by_id = {t.episode_id: t for t in got}
    lost = sum(
        1 for episode_id in good if not _same(got_by_id.get(episode_id), clean.by_id[episode_id])
    )
    detail = text.strip().splitlines()[0][:200] if text.strip() else ""
    return Result(case.kind, case.seed, outcome, lost, detail)


def _same(trajectory: Any, clean_json: str) -> bool:
    from agenttrace import Trajectory

    return trajectory is not None and trajectory == Trajectory.from_json(clean_json)


def _export(source: Path, out: Path) -> int:
    from agenttrace.cli.main import main

    return main(["export", "--from", str(source), "--out", str(out), "--quiet"])


def _load_resave_summarise(source: Path, workdir: Path) -> tuple[list, int]:
    """Load (problems reported, not raised), re-save every loaded trajectory, summarise."""
    import warnings

    from agenttrace.cli.main import main
    from agenttrace.sinks import load_trajectories

    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = load_trajectories(source, on_error=lambda error: problems.append(str(error)))
    resaved = workdir / "resaved.jsonl"
    with resaved.open("w", encoding="utf-8", errors="surrogatepass") as file:
        for trajectory in got:
            file.write(trajectory.to_json() + "\n")
    code = main(["inspect", str(source)])
    if problems:
        print(f"{len(problems)} problem(s): {problems[0]}", file=sys.stderr)
    return got, code


# --- many cases, in worker processes ----------------------------------------------------------

_worker_state: dict[str, Any] = {}


def _init_worker(clean: CleanRun, memory_mb: int, timeout: float) -> None:
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _worker_state.update(
        clean=clean,
        timeout=timeout,
        workdir=Path(tempfile.mkdtemp(prefix="agenttrace-fuzz-")),
        blobs={SPANS: clean.spans.read_bytes(), TRAJECTORIES: clean.trajectories.read_bytes()},
    )


def _work(job: tuple[str, int]) -> Result:
    kind, seed = job
    state = _worker_state
    case = make_case(kind, seed, state["blobs"][kind])
    return run_case(case, state["clean"], state["workdir"], state["timeout"])


def run_many(
    cases: int, *, workers: int, timeout: float, memory_mb: int, seed: int, kinds=KINDS
) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="agenttrace-fuzz-clean-") as folder:
        clean = make_clean_run(Path(folder))
        jobs = [(kinds[i % len(kinds)], seed + i) for i in range(cases)]
        context = multiprocessing.get_context("forkserver")
        with context.Pool(
            workers, _init_worker, (clean, memory_mb, timeout), maxtasksperchild=500
        ) as pool:
            results = []
            started = time.monotonic()
            for number, result in enumerate(pool.imap_unordered(_work, jobs, chunksize=8), 1):
                results.append(result)
                if number % 500 == 0 or number == cases:
                    rate = number / (time.monotonic() - started)
                    print(f"  {number}/{cases} cases ({rate:.0f}/s)", file=sys.stderr)
        return results


def table(results: list[Result]) -> str:
    """inputs, clean, clear error, crash, hang, blow-up, good records lost; per kind."""
    header = ["input", "cases", *OUTCOMES, "good records lost"]
    rows = []
    for kind in (*KINDS, "all"):
        mine = [r for r in results if kind == "all" or r.kind == kind]
        outcomes = Counter(r.outcome for r in mine)
        lost = sum(1 for r in mine if r.lost)
        rows.append([kind, str(len(mine)), *(str(outcomes[o]) for o in OUTCOMES), str(lost)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
             for row in [header, *rows]]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    parser.add_argument("--memory", type=int, default=2048, help="MB per worker (0: no limit)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=KINDS, action="append")
    parser.add_argument("--show", type=int, default=5, help="examples of each bad outcome")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run_many(
        args.cases,
        workers=args.workers,
        timeout=args.timeout,
        memory_mb=args.memory,
        seed=args.seed,
        kinds=tuple(args.kind or KINDS),
    )
    print(table(results))
    bad = [r for r in results if r.outcome in ("crash", "hang", "blow-up") or r.lost]
    for result in sorted(bad, key=lambda r: (r.kind, r.outcome, r.seed))[: args.show * 4]:
        print(f"  {result.kind} seed {result.seed}: {result.outcome}, lost {result.lost}: "
              f"{result.detail}")  # fmt: skip
    print(f"{len(results)} cases in {time.monotonic() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())

"""Every Gymnasium space type, nested, in Minari datasets and step tables, against Minari's own
``DataCollector`` on the same seeded loop.

One small env per case (its observation and action spaces, nested Tuple/Dict combos among
them), registered with gymnasium so that its id is recorded at run time. One loop feeds
everything: ``DataCollector(TracedEnv(env), record_infos=True)``, with the run's live
``minari`` and ``steps`` sinks and the span file on. Then, per case and field, read back
through Minari's API only (``minari.load_dataset``, ``iterate_episodes``):

- the live ``minari`` sink's dataset, ``agenttrace export --format minari`` from the span
  file (no ``--env``: the recorded env id is used), and a dataset whose spaces are inferred
  from the values (the trajectories without their env id) each equal DataCollector's;
- the step tables equal what the loop itself saw (pyarrow and pandas read them).

Sequence spaces cannot be stored by Minari (it has no serializer for them; DataCollector
fails on them too): the export says so in one line and leaves nothing behind, and the step
tables hold them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import compatibility
import gymnasium as gym
import minari
import numpy as np
import pandas
import pytest
from gymnasium import spaces
from minari import DataCollector

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.cli.main import main
from agenttrace.instrument.wrappers import TracedEnv
from agenttrace.reading.step_tables import column_values, decoded_column, read_step_tables
from agenttrace.sinks import load_trajectories
from agenttrace.sinks.minari_dataset import MinariSink
from agenttrace.trajectory.equality import values_equal

ROUTE = "`agenttrace export --format minari`, live `minari` sink, inferred spaces"
MINARI_FIELDS = ("observations", "actions", "rewards", "terminations", "truncations", "infos")
#: (The export says so in one line and writes nothing: test_a_sequence_space_is_refused...)
NO_SEQUENCE = "Minari 0.5 cannot store Sequence (nor can DataCollector)"

COMPATIBILITY = [
    compatibility.equal_on("Gymnasium spaces", "Box (every dtype and shape)", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "Discrete", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "MultiDiscrete", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "MultiBinary", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "Text", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "Tuple (nested)", ROUTE),
    compatibility.equal_on("Gymnasium spaces", "Dict (nested)", ROUTE),
    compatibility.equal_on(
        "Gymnasium spaces",
        "Sequence",
        "`agenttrace export --format steps`, live `steps` sink",
        **dict.fromkeys(MINARI_FIELDS, NO_SEQUENCE),
    ),
]

# --- the environments ---------------------------------------------------------------------------

F32 = np.float32
#: Per space type (a COMPATIBILITY row's name), its cases: (observation space, action space).
CASES: dict[str, list[tuple[gym.Space, gym.Space]]] = {
    "Box (every dtype and shape)": [
        (spaces.Box(-1, 1, (3,), F32), spaces.Box(-2, 2, (2, 2), np.float64)),
        (spaces.Box(-5, 5, (2, 3), np.int8), spaces.Box(0, 9, (), np.uint16)),
        (spaces.Box(-1, 1, (4,), np.float16), spaces.Box(-9, 9, (2,), np.int64)),
        (spaces.Box(0, 1, (3,), np.bool_), spaces.Box(0, 99, (2,), np.uint32)),
        (spaces.Box(0, 255, (32, 32, 3), np.uint8), spaces.Box(-7, 7, (1,), np.int32)),
        (spaces.Box(0, 200, (5,), np.uint8), spaces.Box(0, 50, (3,), np.uint64)),
        (spaces.Box(-3, 3, (), np.int16), spaces.Box(-1, 1, (2, 1, 2), F32)),
    ],
    "Discrete": [(spaces.Discrete(7), spaces.Discrete(3, start=1))],
    "MultiDiscrete": [(spaces.MultiDiscrete([[3, 4], [5, 6]]), spaces.MultiDiscrete([2, 3]))],
    "MultiBinary": [(spaces.MultiBinary([2, 3]), spaces.MultiBinary(4))],
    "Text": [(spaces.Text(8, charset="abcdef"), spaces.Text(5, min_length=2))],
    "Tuple (nested)": [
        (
            spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), F32), spaces.Text(4))),
            spaces.Tuple((spaces.Discrete(2), spaces.MultiBinary(3))),
        ),
        (
            spaces.Tuple(
                (
                    spaces.Dict({"a": spaces.Box(0, 1, (2,), F32), "b": spaces.Text(3)}),
                    spaces.Tuple((spaces.MultiDiscrete([4, 4]), spaces.Discrete(5))),
                )
            ),
            spaces.Dict({"x": spaces.Tuple((spaces.Discrete(2), spaces.Text(2)))}),
        ),
    ],
    "Dict (nested)": [
        (
            spaces.Dict(
                {
                    "position": spaces.Box(-1, 1, (2,), F32),
                    "label": spaces.Text(6),
                    "inner": spaces.Dict(
                        {
                            "count": spaces.Discrete(9),
                            "pair": spaces.Tuple((spaces.MultiBinary(2), spaces.Text(3))),
                        }
                    ),
                }
            ),
            spaces.Dict({"move": spaces.Discrete(4), "say": spaces.Text(3)}),
        )
    ],
    "Sequence": [
        (spaces.Sequence(spaces.Discrete(3)), spaces.Sequence(spaces.Box(0, 1, (2,), F32))),
        (
            spaces.Dict({"items": spaces.Sequence(spaces.Text(3)), "n": spaces.Discrete(2)}),
            spaces.Discrete(2),
        ),
    ],
}
CASE_IDS = [(name, i) for name, cases in CASES.items() for i in range(len(cases))]


class SpaceEnv(gym.Env):
    """Observations sampled from its observation space (seeded by reset), infos with nested
    dicts, numpy arrays, numbers, booleans and text, of one structure on every step."""

    def __init__(self, name: str, index: int) -> None:
        self.observation_space, self.action_space = CASES[name][index]
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        self.length = 2 + int(self.np_random.integers(3))
        return self.observation_space.sample(), self._info()

    def _info(self) -> dict:
        return {
            "t": self.t,
            "energy": self.np_random.uniform(0, 1, 3).astype(F32),
            "detail": {"ok": bool(self.t % 2), "note": f"step {self.t}", "x": float(self.t)},
        }

    def step(self, action):
        self.t += 1
        reward = float(self.np_random.normal())
        return self.observation_space.sample(), reward, self.t >= self.length, False, self._info()


def slug(name: str, index: int) -> str:
    return f"{name.split()[0].lower()}{index}"


def env_id(name: str, index: int) -> str:
    return f"agenttrace-spaces/{slug(name, index)}-v0"


for _name, _index in CASE_IDS:
    if env_id(_name, _index) not in gym.registry:
        gym.register(
            env_id(_name, _index),
            entry_point=f"{__name__}:SpaceEnv",
            kwargs={"name": _name, "index": _index},
            max_episode_steps=3,  # (some episodes end truncated)
        )


# --- one loop per case, every recorder on ---------------------------------------------------------


@dataclasses.dataclass
class Recorded:
    """What one case's loop gave: DataCollector's dataset (or why it failed), agenttrace's
    datasets by route, the step tables folder, the loop's own values, the export's exit."""

    theirs: Any
    ours: dict[str, Any]
    tables: Path
    seen: list[dict[str, Any]]
    export_code: int
    export_error: str
    datasets: Path


def play(env: gym.Env, episodes: int = 3) -> list[dict[str, Any]]:
    """The seeded loop; per episode what it saw (observations: the reset's, then each
    step's; infos likewise)."""
    seen = []
    env.action_space.seed(5)
    for episode in range(episodes):
        observation, info = env.reset(seed=10 + episode)
        record: dict[str, Any] = {"observations": [observation], "infos": [info]}
        for key in ("actions", "rewards", "terminations", "truncations"):
            record[key] = []
        done = False
        while not done:
            action = env.action_space.sample()
            observation, reward, terminated, truncated, info = env.step(action)
            for key, value in (
                ("actions", action),
                ("observations", observation),
                ("rewards", reward),
                ("terminations", terminated),
                ("truncations", truncated),
                ("infos", info),
            ):
                record[key].append(value)
            done = terminated or truncated
        seen.append(record)
    return seen


def record(name: str, index: int, out: Path, datasets: Path) -> Recorded:
    storable = name != "Sequence"
    case = slug(name, index)
    runtime = at.configure(
        out=str(out),
        run_name=case,
        sinks=["jsonl", "steps", *(["minari"] if storable else [])],
        spans=["file"],
        minari_dataset_id=f"live/{case}-v0",
    )
    env = TracedEnv(gym.make(env_id(name, index)))
    theirs: Any
    if storable:
        env = DataCollector(env, record_infos=True)
        seen = play(env)
        theirs = env.create_dataset(dataset_id=f"datacollector/{case}-v0")
    else:
        with pytest.raises(NotImplementedError, match="Sequence") as raised:
            DataCollector(env, record_infos=True)
        theirs = raised.value
        seen = play(env)
    runtime.shutdown()
    args = ["export", "--from", str(runtime.span_paths[0]), "--format", "minari", "--quiet"]
    with contextlib.redirect_stderr(io.StringIO()) as stderr:
        code = main([*args, "--dataset-id", f"exported/{case}-v0"])
    ours: dict[str, Any] = {}
    if storable:
        ours["live"] = minari.load_dataset(f"live/{case}-v0")
        ours["export"] = minari.load_dataset(f"exported/{case}-v0")
        # The same trajectories without their env id: spaces inferred from the values.
        sink = MinariSink(f"inferred/{case}-v0")
        for trajectory in sorted(
            load_trajectories(runtime.trajectory_paths), key=lambda t: t.start_time
        ):
            attributes = {k: v for k, v in trajectory.attributes.items() if k != sc.ENV_NAME}
            sink.write(dataclasses.replace(trajectory, attributes=attributes))
        sink.close()
        ours["inferred"] = minari.load_dataset(f"inferred/{case}-v0")
    return Recorded(theirs, ours, out / case, seen, code, stderr.getvalue(), datasets)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[tuple[str, int], Recorded]:
    root = tmp_path_factory.mktemp("minari-spaces")
    before = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (Minari's notes: unset metadata, spaces)
            return {(n, i): record(n, i, root / "runs", root / "datasets") for n, i in CASE_IDS}
    finally:
        if before is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = before


# --- comparing ------------------------------------------------------------------------------------


def assert_same(ours: Any, theirs: Any, what: str) -> None:
    """Equal values of the same kind, all the way down: dicts by key, tuples by position,
    lists of text, arrays by dtype, shape and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), what
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{what}.{key}")
    elif isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), what
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{what}[{i}]")
    elif isinstance(theirs, list):
        assert ours == theirs, what
    else:
        assert isinstance(ours, np.ndarray), what
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), what
        np.testing.assert_array_equal(ours, theirs, err_msg=what)


def assert_loop_value(got: Any, want: Any, what: str) -> None:
    """A value read from the step tables equals the loop's: same kind, dtype and shape."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), what
        for key in want:
            assert_loop_value(got[key], want[key], f"{what}.{key}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), what
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_loop_value(a, b, f"{what}[{i}]")
    elif isinstance(want, (np.ndarray, np.generic)):
        assert isinstance(got, (np.ndarray, np.generic)), what
        assert (got.dtype, np.shape(got)) == (want.dtype, np.shape(want)), what
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        assert type(got) is type(want) and got == want, what


def cases_of(name: str) -> list[tuple[str, int]]:
    return [(n, i) for n, i in CASE_IDS if n == name]


def entry_fields(kinds: tuple[str, ...]) -> list[tuple[Any, str]]:
    return [(e, f) for e in COMPATIBILITY for f in e.equal_fields() if f in kinds]


def _id(value: Any) -> str:
    return getattr(value, "name", str(value))


@pytest.mark.parametrize("route", ["live", "export", "inferred"])
@pytest.mark.parametrize(("entry", "field"), entry_fields(MINARI_FIELDS), ids=_id)
def test_minari_datasets_equal_datacollectors(recorded, entry, field, route) -> None:
    """Field by field, every episode: agenttrace's dataset (read through Minari's API) and
    DataCollector's for the same loop; with the recorded env, the spaces and spec too."""
    for key in cases_of(entry.name):
        case = recorded[key]
        ours, theirs = case.ours[route], case.theirs
        assert ours.total_episodes == theirs.total_episodes == 3
        assert ours.total_steps == theirs.total_steps
        pairs = zip(ours.iterate_episodes(), theirs.iterate_episodes(), strict=True)
        for a, b in pairs:
            assert_same(getattr(a, field), getattr(b, field), f"{key} {route} {field} {b.id}")
        if route != "inferred" and field in ("observations", "actions"):
            space = f"{field[:-1]}_space"  # (observation_space, action_space)
            assert getattr(ours, space) == getattr(theirs, space)
            assert ours.spec.env_spec.id == env_id(*key)  # (the id recorded at run time)


@pytest.mark.parametrize(("entry", "field"), entry_fields(("step tables",)), ids=_id)
def test_step_tables_equal_the_loop(recorded, entry, field) -> None:
    """The steps table (pyarrow, pandas) and the episodes table's typed final observation
    hold what the loop saw: every observation, action, reward, flag and info."""
    assert field == "step tables"
    for key in cases_of(entry.name):
        case = recorded[key]
        steps, episodes = read_step_tables(case.tables)
        expected = [
            {
                "observation": episode["observations"][i],
                "action": episode["actions"][i],
                "reward": episode["rewards"][i],
                "terminated": episode["terminations"][i],
                "truncated": episode["truncations"][i],
                "info": episode["infos"][i + 1],
            }
            for episode in case.seen
            for i in range(len(episode["actions"]))
        ]
        assert steps.num_rows == len(expected)
        for column in ("observation", "action"):
            values = column_values(steps, column)
            assert len(values) == len(expected)
            for row, (got, want) in enumerate(zip(values, expected, strict=True)):
                assert_loop_value(got, want[column], f"{key} {column} row {row}")
        assert steps["reward"].to_pylist() == [row["reward"] for row in expected]
        frame = pandas.read_parquet(case.tables / "steps")
        assert frame["terminated"].tolist() == [row["terminated"] for row in expected]
        assert frame["truncated"].tolist() == [row["truncated"] for row in expected]
        for got, row in zip(decoded_column(steps["info"]), expected, strict=True):
            assert values_equal(got, row["info"])
        # The episodes table: the final observation, typed as the steps' observations.
        final_type = episodes.schema.field("final_observation").type
        assert final_type == steps.schema.field("observation").type
        finals = column_values(episodes, "final_observation")
        for got, episode in zip(finals, case.seen, strict=True):
            assert_loop_value(got, episode["observations"][-1], f"{key} final observation")


def test_typed_columns_for_every_space_but_irregular_ones(recorded) -> None:
    """Typed columns for every space type but Sequence (values that change length) and a
    float16 Box (not every reader has float16): those are the encoded column."""
    for (name, index), case in recorded.items():
        steps, episodes = read_step_tables(case.tables)
        obs_space = CASES[name][index][0]
        irregular = isinstance(obs_space, spaces.Sequence) or obs_space.dtype == np.float16
        for table, column in ((steps, "observation"), (episodes, "final_observation")):
            encoding = table.schema.field(column).metadata[b"agenttrace.encoding"]
            assert encoding == (b"json" if irregular else b"typed"), (name, index, column)


def test_a_sequence_space_is_refused_in_one_line_and_nothing_is_left(recorded) -> None:
    for key in cases_of("Sequence"):
        case = recorded[key]
        assert isinstance(case.theirs, NotImplementedError)  # (DataCollector cannot either)
        assert case.export_code == 1
        assert case.export_error.count("\n") == 1, case.export_error
        assert "Minari cannot store" in case.export_error and "Sequence" in case.export_error
        assert not (case.datasets / "exported" / f"{slug(*key)}-v0").exists()
    leftovers = [p.name for p in (case.datasets / "exported").iterdir() if p.name[0] == "."]
    assert leftovers == []


# --- the environment id, failed exports --------------------------------------------------------

THIRD_PARTY = """
import gymnasium as gym
from gymnasium import spaces


class PairEnv(gym.Env):
    observation_space = spaces.Tuple((spaces.Discrete(4), spaces.Text(3)))
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 1.0, self.t >= 2, False, {}


gym.register("ThirdPartyPair-v0", entry_point="PACKAGE:PairEnv")
"""


def test_env_from_a_third_party_package(tmp_path, monkeypatch, capsys) -> None:
    """``--env PACKAGE:ID`` imports the package that registers the env (in a fresh process,
    where gymnasium does not know it); a plain id it cannot find, or a package that cannot
    be imported, is one error line (exit 2) and nothing is written. Without ``--env`` the
    env spec recorded at run time makes the env, in a process that never imported it."""
    package = "agenttrace_thirdparty_envs"
    site = tmp_path / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(
        textwrap.dedent(THIRD_PARTY).replace("PACKAGE", package)
    )
    monkeypatch.syspath_prepend(str(site))
    datasets = tmp_path / "datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets))
    runtime = at.configure(out=str(tmp_path / "runs"), run_name="pair", spans=["file"])
    env = TracedEnv(gym.make(f"{package}:ThirdPartyPair-v0"))
    for seed in range(2):
        env.reset(seed=seed)
        while not any(env.step(1)[2:4]):
            pass
    runtime.shutdown()
    capsys.readouterr()
    spans = str(runtime.span_paths[0])
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])

    def export(*extra: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "agenttrace", "export", "--from", spans]
        command += ["--format", "minari", "--quiet", *extra]
        environ = {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}
        return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)

    done = export("--dataset-id", "third/pair-v0", "--env", f"{package}:ThirdPartyPair-v0")
    assert done.returncode == 0, done.stderr
    dataset = minari.load_dataset("third/pair-v0")
    assert dataset.observation_space == spaces.Tuple((spaces.Discrete(4), spaces.Text(3)))
    assert dataset.spec.env_spec.id == "ThirdPartyPair-v0" and dataset.total_episodes == 2
    failed = export("--dataset-id", "third/again-v0", "--env", "ThirdPartyPair-v0")
    assert failed.returncode == 2, failed.stderr
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert "--env PACKAGE:ThirdPartyPair-v0" in failed.stderr
    bad = ["--dataset-id", "third/again-v0", "--env", "no_such_package_here:ThirdPartyPair-v0"]
    assert main(["export", "--from", spans, "--format", "minari", *bad]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot import no_such_package_here" in error, error
    assert not (datasets / "third" / "again-v0").exists()
    # No --env: the env spec recorded at run time (rl.env.spec) makes the env there.
    recorded = export("--dataset-id", "third/recorded-v0")
    assert recorded.returncode == 0, recorded.stderr
    again = minari.load_dataset("third/recorded-v0")
    assert again.spec.env_spec.id == "ThirdPartyPair-v0"
    assert again.observation_space == dataset.observation_space
    for a, b in zip(again.iterate_episodes(), dataset.iterate_episodes(), strict=True):
        assert_same(a.observations, b.observations, "observations")


class ChatEnv(gym.Env):
    """Chat messages as observations: no gymnasium space holds them (not registered)."""

    observation_space = spaces.Discrete(1)  # (a stand-in: the values are messages)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return [{"role": "user", "content": "hi"}], {}

    def step(self, action):
        self.t += 1
        return [{"role": "user", "content": f"turn {self.t}"}], 1.0, self.t >= 2, False, {}


def spans_of(out: Path, name: str, env: gym.Env, episodes: int = 2) -> str:
    """A run of ``env`` (seeded resets, action 1) recorded to a span file; its path."""
    runtime = at.configure(out=str(out), run_name=name, spans=["file"])
    env = TracedEnv(env)
    for seed in range(episodes):
        env.reset(seed=seed)
        while not any(env.step(1)[2:4]):
            pass
    runtime.shutdown()
    return str(runtime.span_paths[0])


def test_a_failed_export_leaves_nothing_and_force_replaces(tmp_path, monkeypatch, capsys):
    """A failed export (here: chat observations no space holds) leaves no folder; a broken
    dataset folder at the target is named without --force and replaced with it; a folder
    that is not a Minari dataset is never replaced."""
    datasets = tmp_path / "datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets))
    chat = spans_of(tmp_path / "runs", "chat", ChatEnv())
    cartpole = spans_of(tmp_path / "runs", "cartpole", gym.make("CartPole-v1"))
    capsys.readouterr()
    args = ["export", "--from", chat, "--format", "minari", "--quiet"]
    assert main([*args, "--dataset-id", "broken/chat-v0"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Minari needs a gymnasium space" in error, error
    assert list(datasets.iterdir()) == []  # (nothing, not even a hidden folder)
    # A partial dataset folder at the target (an older export that crashed, say).
    (datasets / "broken" / "chat-v0" / "data").mkdir(parents=True)
    ok = ["export", "--from", cartpole, "--format", "minari", "--quiet"]
    assert main([*ok, "--dataset-id", "broken/chat-v0"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--force" in error, error
    assert main([*ok, "--dataset-id", "broken/chat-v0", "--force"]) == 0
    assert minari.load_dataset("broken/chat-v0").total_episodes == 2
    assert [p.name for p in datasets.rglob(".*")] == []
    (datasets / "mine" / "notes-v0").mkdir(parents=True)
    (datasets / "mine" / "notes-v0" / "notes.txt").write_text("keep me")
    assert main([*ok, "--dataset-id", "mine/notes-v0", "--force"]) == 2
    assert "is not a Minari dataset" in capsys.readouterr().err
    assert (datasets / "mine" / "notes-v0" / "notes.txt").read_text() == "keep me"

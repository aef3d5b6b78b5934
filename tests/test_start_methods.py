"""Every multiprocessing start method: fork, spawn and forkserver.

Spawn and forkserver workers are fresh interpreters: what they run reaches them pickled
(gymnasium's ``AsyncVectorEnv`` sends its env_fns with cloudpickle; ``Pool.map`` sends its
function by reference). What agenttrace patched must pickle as the original does, or the
program crashes under agenttrace only (``gym.make_vec(..., vector_kwargs={"context":
"spawn"})`` used to raise ``NotImplementedError: object proxy must define __reduce_ex__()``).
And a spawned worker records what a forked one records.

Unit tests: each kind of proxy agenttrace installs pickles (``pickle``, cloudpickle) and
copies as the unpatched original: the same bytes where pickle can write them, the patched
object back in this process, the original in a process where agenttrace is not active.

Real runs: a CleanRL-style loop over a real ``AsyncVectorEnv`` of CartPole (and a
``Pool.map`` rollout) under ``opentelemetry-instrument`` with each start method, with
``AGENTTRACE_GYMNASIUM=1``, with ``AGENTTRACE_TARGETS`` and with a targets file. Each run
exits 0; its trajectories, loaded with ``load_trajectories``, equal the fork run's field by
field (ids, times and process ids aside) and equal what the loop itself saw from
``env.step``.
"""

from __future__ import annotations

import copy
import functools
import json
import pickle
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from conftest import clean_environ, run_instrumented, run_script
from instrumented_pkg import shapes

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.instrument import propagate_patches
from agenttrace.instrument.auto import AgentTraceInstrumentor, TracedFunction, TracedMethod
from agenttrace.instrument.propagate_patches import PropagationWrapper
from agenttrace.instrument.proxies import BoundPatchProxy, PatchProxy
from agenttrace.instrument.wrappers import instrument_gymnasium, uninstrument_gymnasium
from agenttrace.sinks import load_trajectories

TESTS = Path(__file__).parent
S = "instrumented_pkg.shapes"
METHODS = ("fork", "spawn", "forkserver")
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


# --- unit: each kind of proxy pickles and copies as its original -----------------------------


@pytest.fixture
def instrumentor():
    instrumentor = AgentTraceInstrumentor()
    yield instrumentor
    instrumentor.uninstrument()


def pickles(obj: Any) -> dict[int, bytes]:
    return {protocol: pickle.dumps(obj, protocol) for protocol in PROTOCOLS}


def loaded_elsewhere(pickled: dict[str, bytes], checks: dict[str, str]) -> dict[str, Any]:
    """Unpickle each value in a fresh ``python`` where agenttrace is not active and evaluate
    ``checks[name]`` (with ``obj`` the unpickled object) there."""
    code = textwrap.dedent(
        """
        import json, pickle, sys
        import gymnasium, concurrent.futures
        from instrumented_pkg import shapes
        found = {}
        for name, data in pickle.loads(sys.stdin.buffer.read()).items():
            obj = pickle.loads(data)
            found[name] = eval(CHECKS[name])
        found["agenttrace imported"] = any(m.startswith("agenttrace") for m in sys.modules)
        print(json.dumps(found))
        """
    ).replace("CHECKS", repr(checks))
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(pickled),
        env=clean_environ(PYTHONPATH=str(TESTS)),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


def test_gymnasium_make_pickles_as_the_original() -> None:
    """``gymnasium.make`` and ``make_vec`` under instrument_gymnasium: one proxy per function
    (``gym.make is gym.envs.registration.make``, as before), pickled to the very bytes the
    original gives, with pickle and cloudpickle; ``partial(gym.make, ...)`` too."""
    names = ("make", "make_vec")
    originals = {name: getattr(gym, name) for name in names}
    plain = {name: pickles(originals[name]) for name in names}
    cloud = {name: cloudpickle.dumps(originals[name]) for name in names}
    instrument_gymnasium()
    try:
        for name in names:
            proxy = getattr(gym, name)
            assert isinstance(proxy, PatchProxy) and proxy is not originals[name]
            assert getattr(gym.envs.registration, name) is proxy
            assert pickles(proxy) == plain[name]
            assert cloudpickle.dumps(proxy) == cloud[name]
            assert pickle.loads(pickle.dumps(proxy)) is proxy
            assert cloudpickle.loads(cloudpickle.dumps(proxy)) is proxy
            assert copy.copy(proxy) is proxy and copy.deepcopy(proxy) is proxy
            assert copy.copy(originals[name]) is originals[name]  # (what the original does)
        make = functools.partial(gym.make, "CartPole-v1")
        assert pickle.loads(pickle.dumps(make)).func is gym.make
        assert cloudpickle.loads(cloudpickle.dumps(make)).func is gym.make
        data = {name: pickle.dumps(getattr(gym, name)) for name in names}
        data["partial"] = cloudpickle.dumps(make)
    finally:
        uninstrument_gymnasium()
    for name in names:
        assert pickle.loads(data[name]) is originals[name] is getattr(gym, name)
    elsewhere = loaded_elsewhere(
        data,
        {
            "make": "obj is gymnasium.make is gymnasium.envs.registration.make",
            "make_vec": "obj is gymnasium.make_vec",
            "partial": "obj.func is gymnasium.make",
        },
    )
    assert elsewhere == {
        "make": True,
        "make_vec": True,
        "partial": True,
        "agenttrace imported": False,
    }


def test_vector_env_init_patches_pickle_as_the_original() -> None:
    """``SyncVectorEnv.__init__`` / ``AsyncVectorEnv.__init__`` (patched to index their
    env_fns) reached through the class: ``getattr(class, "__init__")``, as pickle writes a
    method below protocol 4; the patched one here, the original elsewhere."""
    classes = (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)
    originals = [vars(cls)["__init__"] for cls in classes]
    plain = [pickles(cls.__init__) for cls in classes]
    instrument_gymnasium()
    try:
        data = {}
        for cls, original, before in zip(classes, originals, plain, strict=True):
            assert isinstance(vars(cls)["__init__"], PatchProxy)
            method = cls.__init__
            assert type(method) is BoundPatchProxy
            after = pickles(method)
            assert all(after[p] == before[p] for p in PROTOCOLS if p < 4)
            back = pickle.loads(after[pickle.HIGHEST_PROTOCOL])
            assert type(back) is BoundPatchProxy and back.__wrapped__ is original
            assert copy.copy(method) is method and copy.deepcopy(method) is method
            data[cls.__name__] = after[pickle.HIGHEST_PROTOCOL]
    finally:
        uninstrument_gymnasium()
    for cls, original in zip(classes, originals, strict=True):
        assert pickle.loads(data[cls.__name__]) is original
    elsewhere = loaded_elsewhere(
        data,
        {
            "SyncVectorEnv": "obj is vars(gymnasium.vector.SyncVectorEnv)['__init__']",
            "AsyncVectorEnv": "obj is vars(gymnasium.vector.AsyncVectorEnv)['__init__']",
        },
    )
    assert all(elsewhere[name] for name in ("SyncVectorEnv", "AsyncVectorEnv"))
    assert not elsewhere["agenttrace imported"]


def test_traced_functions_and_methods_pickle_as_the_original(instrumentor) -> None:
    """Targets: a traced function is written as the function's own global reference (same
    bytes); a traced method bound to an object, a classmethod and a staticmethod pickle as
    the original bound method or function; copies are the original's kind of copy."""
    env = shapes.Env()
    forms = {
        "function": lambda: shapes.step,
        "method": lambda: env.step,
        "classmethod": lambda: shapes.Env.class_step,
        "classmethod via object": lambda: env.class_step,
        "staticmethod": lambda: shapes.Env.static_step,
        "method via class": lambda: shapes.Env.step,
    }
    before = {name: pickles(form()) for name, form in forms.items()}
    originals = {name: form() for name, form in forms.items()}
    instrumentor.instrument(
        targets=[
            f"{S}:step=env.step",
            f"{S}:Env.step=env.step",
            f"{S}:Env.static_step=env.step",
            f"{S}:Env.class_step=env.step",
        ]
    )
    assert isinstance(shapes.step, TracedFunction)
    assert isinstance(vars(shapes.Env)["step"], TracedMethod)
    # The same bytes at every protocol, except for a function reached through its class:
    # getattr(class, name), what pickle writes for it below protocol 4 (above, a dotted
    # global reference, which must lead to this very object: a class gives a new binding).
    through_class = ("staticmethod", "method via class")
    data = {}
    for name, form in forms.items():
        traced = form()
        assert isinstance(traced, (TracedFunction, BoundPatchProxy)), name
        after = pickles(traced)
        same = [p for p in PROTOCOLS if after[p] == before[name][p]]
        assert same == [p for p in PROTOCOLS if p < 4 or name not in through_class], name
        back = pickle.loads(after[pickle.HIGHEST_PROTOCOL])
        assert type(back) is type(traced), name
        if name == "method":  # bound to the unpickled copy of env, as the original would be
            assert back.__self__ is not env and back.__func__ is traced.__func__
        else:
            assert back == traced, name
        data[name] = after[pickle.HIGHEST_PROTOCOL]
    assert pickle.loads(data["function"]) is shapes.step  # identity with the module attribute
    assert pickle.loads(data["method"]).__self__.__class__ is shapes.Env
    # copies, as of the original: a function is its own copy; a bound method is bound again
    assert copy.copy(shapes.step) is shapes.step and copy.deepcopy(shapes.step) is shapes.step
    assert copy.copy(env.step).__self__ is env and copy.copy(env.step) == env.step
    deep = copy.deepcopy(env.step)
    assert type(deep) is BoundPatchProxy and deep.__self__ is not env
    assert isinstance(deep.__self__, shapes.Env)
    assert copy.copy(shapes.Env.class_step).__self__ is shapes.Env
    instrumentor.uninstrument()
    for name in forms:
        back = pickle.loads(data[name])
        if name == "method":
            assert back.__func__ is vars(shapes.Env)["step"]
        else:
            assert back == originals[name] and type(back) is type(originals[name]), name
    assert copy.deepcopy(env.step).__self__ is not env  # (the original's deep copy)
    elsewhere = loaded_elsewhere(
        data,
        {
            "function": "obj is shapes.step",
            "method": "obj.__func__ is vars(shapes.Env)['step']",
            "classmethod": "obj == shapes.Env.class_step and obj.__self__ is shapes.Env",
            "classmethod via object": "obj == shapes.Env.class_step",
            "staticmethod": "obj is shapes.Env.static_step",
            "method via class": "obj is shapes.Env.step",
        },
    )
    assert elsewhere == {**dict.fromkeys(forms, True), "agenttrace imported": False}


def test_propagation_patches_pickle_as_the_original() -> None:
    """``ThreadPoolExecutor.submit`` patched for context propagation: by reference through the
    class; bound to an executor it fails exactly as the original does (an executor holds a
    queue), for pickle and deepcopy alike, and ``copy.copy`` rebinds it."""

    def failure(call: Any) -> tuple[str, str] | None:
        try:
            call()
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return None

    executor = ThreadPoolExecutor(1)
    original = vars(ThreadPoolExecutor)["submit"]
    before = pickles(ThreadPoolExecutor.submit)
    failures = [
        failure(lambda: pickle.dumps(executor.submit)),
        failure(lambda: copy.deepcopy(executor.submit)),
    ]
    propagation = propagate_patches.apply(["threads"])
    try:
        assert isinstance(vars(ThreadPoolExecutor)["submit"], PropagationWrapper)
        after = pickles(ThreadPoolExecutor.submit)
        assert all(after[p] == before[p] for p in PROTOCOLS if p < 4)
        back = pickle.loads(after[pickle.HIGHEST_PROTOCOL])
        assert type(back) is BoundPatchProxy and back.__wrapped__ is original
        assert failures[0] is not None
        assert [
            failure(lambda: pickle.dumps(executor.submit)),
            failure(lambda: copy.deepcopy(executor.submit)),
        ] == failures
        rebound = copy.copy(executor.submit)
        assert type(rebound) is BoundPatchProxy and rebound.__self__ is executor
    finally:
        propagation.undo()
        executor.shutdown()
    assert pickle.loads(after[pickle.HIGHEST_PROTOCOL]) is original


def test_a_proxy_whose_name_leads_elsewhere_pickles_as_its_original() -> None:
    """A function that cannot be found by its name (defined in another function): pickle
    fails for the proxy exactly as for the function, and cloudpickle sends the function by
    value in both cases (what arrives is the original)."""

    def outer() -> Any:
        def local(x: int) -> int:
            return x + 1

        return local

    local = outer()
    proxy = PatchProxy(local, lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    failures = []
    for obj in (local, proxy):
        with pytest.raises(Exception) as raised:
            pickle.dumps(obj)
        failures.append((type(raised.value), str(raised.value)))
    assert failures[0] == failures[1]
    back = cloudpickle.loads(cloudpickle.dumps(proxy))
    assert not isinstance(back, PatchProxy) and back.__qualname__ == local.__qualname__
    assert back(1) == 2


def test_spawn_and_forkserver_workers_are_told_from_their_command_line() -> None:
    """What multiprocessing runs to start a fresh interpreter (interpreter flags first)."""
    from agenttrace.instrument.script import in_multiprocessing_child

    python = sys.executable
    spawn = "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"
    server = "from multiprocessing.forkserver import main; main(3, 5, ['__main__'])"
    tracker = "from multiprocessing.resource_tracker import main;main(4)"
    assert in_multiprocessing_child([python, "-c", spawn, "--multiprocessing-fork"])
    assert in_multiprocessing_child([python, "-B", "-s", "-c", server])
    assert in_multiprocessing_child([python, "-X", "dev", "-W", "error", "-c", spawn])
    assert in_multiprocessing_child([python, "-c", tracker])
    assert not in_multiprocessing_child([python, "train.py", "-c", spawn])
    assert not in_multiprocessing_child([python, "-c", "print('from multiprocessing')"])
    assert not in_multiprocessing_child([python, "-m", "pkg.train"])


# --- real runs: the same loop with every start method ----------------------------------------

NUM_ENVS, LIMIT, SEED, STEPS = 3, 40, 7, 110

LOOP = """
import functools
import json
import multiprocessing
import sys

import gymnasium as gym
import numpy as np

NUM_ENVS, LIMIT, SEED, STEPS = CONSTANTS


class Pole(gym.Wrapper):
    \"\"\"The user's own environment class, defined in the script (so pickled by value).\"\"\"

    def __init__(self):
        super().__init__(gym.make("CartPole-v1", max_episode_steps=LIMIT))

    def reset(self, **kwargs):
        return self.env.reset(**kwargs)

    def step(self, action):
        return self.env.step(action)


def policy(observation):
    return int(observation[2] > 0)


def play(seed):
    \"\"\"One episode, as a Pool task: what it saw from env.step.\"\"\"
    env = gym.make("CartPole-v1", max_episode_steps=LIMIT)
    observation, _ = env.reset(seed=seed)
    steps = []
    while True:
        action = policy(observation)
        after, reward, terminated, truncated, _ = env.step(action)
        steps.append([observation.tolist(), action, float(reward)])
        observation = after
        if terminated or truncated:
            end = "completed" if terminated else "truncated"
            flags = [bool(terminated), bool(truncated)]
            return {"steps": steps, "end": end, "flags": flags, "final": observation.tolist()}


def rollout(seed):  # a Pool task that is no target: its call to play() is traced
    return play(seed)


def vector_loop(route, context):
    if route in ("make_vec", "targets"):
        envs = gym.make_vec(
            "CartPole-v1",
            num_envs=NUM_ENVS,
            vectorization_mode="async",
            vector_kwargs={"context": context},
            max_episode_steps=LIMIT,
        )
    elif route == "by_hand":  # CleanRL's way; pickles the (patched) gym.make itself
        make = functools.partial(gym.make, "CartPole-v1", max_episode_steps=LIMIT)
        envs = gym.vector.AsyncVectorEnv([make] * NUM_ENVS, context=context)
    else:
        envs = gym.vector.AsyncVectorEnv([Pole] * NUM_ENVS, context=context)
    observations, _ = envs.reset(seed=SEED)
    seen = [[{"steps": [], "end": None}] for _ in range(NUM_ENVS)]
    pending = [False] * NUM_ENVS
    for _ in range(STEPS):
        actions = np.array([policy(o) for o in observations])
        after, rewards, terminations, truncations, _ = envs.step(actions)
        for i in range(NUM_ENVS):
            if pending[i]:  # next-step autoreset: this result is the next episode's reset
                seen[i].append({"steps": [], "end": None})
                pending[i] = False
                continue
            episode = seen[i][-1]
            episode["steps"].append([observations[i].tolist(), int(actions[i]), float(rewards[i])])
            if terminations[i] or truncations[i]:
                episode["end"] = "completed" if terminations[i] else "truncated"
                episode["flags"] = [bool(terminations[i]), bool(truncations[i])]
                episode["final"] = after[i].tolist()
                pending[i] = True
        observations = after
    envs.close()
    return seen


def main(route, context, *how):
    if "code" in how:
        from agenttrace.instrument.wrappers import instrument_gymnasium

        instrument_gymnasium()
    if route == "pool":
        with multiprocessing.get_context(context).Pool(2) as pool:
            seen = pool.map(play, [SEED, SEED + 1]) + pool.map(rollout, [SEED + 2, SEED + 3])
            pool.close()
            pool.join()
    else:
        seen = vector_loop(route, context)
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
""".replace("CONSTANTS", f"{NUM_ENVS}, {LIMIT}, {SEED}, {STEPS}")

#: What varies from run to run, whatever the start method: ids, clocks, process ids.
_RUN_FIELDS = ("episode_id", "trace_id", "start_time", "end_time")
_RUN_ATTRIBUTES = (sc.ENV_WORKER, "gen_ai.conversation.id")


def comparable(trajectory: at.Trajectory) -> dict[str, Any]:
    found = trajectory.to_dict()
    for key in _RUN_FIELDS:
        found.pop(key)
    attributes = found["attributes"]
    found["attributes"] = {k: v for k, v in attributes.items() if k not in _RUN_ATTRIBUTES}
    for step in found["steps"]:
        step.pop("start_time")
        step.pop("end_time")
    return found


def run(folder: Path, route: str, method: str, *how: str, **settings: str) -> Any:
    """The loop with ``method`` under opentelemetry-instrument: what it saw, and its
    trajectories by sub-environment (or by seed for the Pool), each in start order."""
    out = folder / f"runs-{route}-{method}"
    done = run_instrumented(
        folder, LOOP, route, method, *how, name="train.py", AGENTTRACE_OUT=str(out), **settings
    )
    for crash in ("Traceback", "NotImplementedError", "PicklingError", "failed"):
        assert crash not in done.stderr, done.stderr[-3000:]
    # Workers report nothing at exit (as forked ones, which end with os._exit): at most the
    # parent's one line about its own targets.
    assert done.stderr.count("never called in this process") <= 1, done.stderr[-3000:]
    files = sorted(out.glob("*/trajectories.jsonl"))
    groups: dict[int, list[at.Trajectory]] = {}
    for path in files:
        in_order = sorted(load_trajectories([path]), key=lambda t: t.start_time)
        for trajectory in in_order:
            if route == "pool":
                key = trajectory.attributes[sc.EPISODE_SEED]
            elif sc.ENV_INDEX in trajectory.attributes:
                key = trajectory.attributes[sc.ENV_INDEX]
            else:  # a worker's own run folder: its sub-env is told by its first seed
                key = in_order[0].attributes[sc.EPISODE_SEED] - SEED
            groups.setdefault(key, []).append(trajectory)
    return json.loads(done.stdout), groups, files


def check_against_loop(seen: list, groups: dict[int, list[at.Trajectory]], open_status: str):
    """The trajectories are what the loop saw from env.step: per sub-environment, each
    finished episode step by step (observation acted on, action, reward, flags), its status
    and final observation; the episode open at close() has the steps played so far."""
    assert sorted(groups) == list(range(len(seen)))
    statuses = set()
    for index, episodes in enumerate(seen):
        trajectories = groups[index]
        assert len(trajectories) == len(episodes), index
        assert trajectories[0].attributes[sc.EPISODE_SEED] == SEED + index
        for trajectory, episode in zip(trajectories, episodes, strict=True):
            steps = trajectory.steps
            assert len(steps) == trajectory.length == len(episode["steps"])
            assert trajectory.missing_steps == []
            for step, (observation, action, reward) in zip(steps, episode["steps"], strict=True):
                np.testing.assert_array_equal(np.asarray(step.observation, float), observation)
                assert (step.action, step.reward) == (action, reward)
            status = episode["end"] or open_status
            assert trajectory.status == status
            statuses.add(status)
            if episode["end"] is not None:
                assert [steps[-1].terminated, steps[-1].truncated] == episode["flags"]
                final = np.asarray(trajectory.final_observation, float)
                np.testing.assert_array_equal(final, episode["final"])
                assert trajectory.return_ == sum(reward for *_, reward in episode["steps"])
    return statuses


def check_every_method(tmp_path: Path, route: str, open_status: str, **settings: str) -> dict:
    runs = {method: run(tmp_path, route, method, **settings) for method in METHODS}
    seen, forked, _ = runs["fork"]
    statuses = check_against_loop(seen, forked, open_status)
    assert {sc.STATUS_COMPLETED, sc.STATUS_TRUNCATED} <= statuses  # both ends are covered
    expected = {key: [comparable(t) for t in group] for key, group in forked.items()}
    for method in ("spawn", "forkserver"):
        seen_there, groups, _ = runs[method]
        assert seen_there == seen, method  # the same play (agenttrace changes nothing)
        assert {key: [comparable(t) for t in group] for key, group in groups.items()} == (
            expected
        ), method
        check_against_loop(seen, groups, open_status)
    return runs


def test_gymnasium_make_vec_records_the_same_with_every_start_method(tmp_path) -> None:
    """``AGENTTRACE_GYMNASIUM=1``, ``gym.make_vec(..., vectorization_mode="async",
    vector_kwargs={"context": method})``: recorded here from the batched results (one run
    folder); spawned and forkserver workers record nothing of their own, as forked ones."""
    runs = check_every_method(tmp_path, "make_vec", sc.STATUS_ABORTED, AGENTTRACE_GYMNASIUM="1")
    for method, (_, groups, files) in runs.items():
        assert len(files) == 1, method
        workers = {t.attributes[sc.ENV_WORKER] for group in groups.values() for t in group}
        assert len(workers) == NUM_ENVS, method  # each sub-env's worker process


def test_gymnasium_vector_env_by_hand_records_the_same_with_every_start_method(tmp_path):
    """``AsyncVectorEnv([partial(gym.make, ...)] * 3, context=method)`` (the patched make
    itself is pickled): each worker records its sub-environment, rl.env.index included."""
    runs = check_every_method(tmp_path, "by_hand", sc.STATUS_ABORTED, AGENTTRACE_GYMNASIUM="1")
    for method, (_, _, files) in runs.items():
        assert len(files) == NUM_ENVS, method  # a run folder per worker


def test_env_targets_record_the_same_with_every_start_method(tmp_path) -> None:
    """``AGENTTRACE_TARGETS`` on gymnasium's ``Env.reset`` and ``Env.step`` (no episode
    function): each worker's env delimits its episodes; the one open at close() has no end
    in the worker, and is written incomplete when the worker exits."""
    check_every_method(
        tmp_path,
        "targets",
        sc.STATUS_INCOMPLETE,
        AGENTTRACE_TARGETS="gymnasium.core:Env.reset=env.reset;gymnasium.core:Env.step=env.step",
    )


def test_a_script_class_in_a_targets_file_records_the_same_with_every_start_method(tmp_path):
    """A targets file naming the script's own env class (``train:Pole.step``): its class is
    sent to spawn and forkserver workers by value (cloudpickle) with its traced methods."""
    targets = tmp_path / "targets.json"
    targets.write_text(
        json.dumps({"targets": ["train:Pole.reset=env.reset", "train:Pole.step=env.step"]})
    )
    check_every_method(tmp_path, "pole", sc.STATUS_INCOMPLETE, AGENTTRACE_TARGETS_FILE=str(targets))


def test_a_script_function_sent_to_a_pool_is_traced_with_every_start_method(tmp_path):
    """``Pool.map(play, seeds)`` with the target ``train:play=episode``: ``play`` is pickled
    by reference (``__main__.play``); a spawn or forkserver worker runs the script as
    ``__mp_main__`` and binds the target there (not importing ``train`` a second time), also
    for the script's own calls to it (``Pool.map(rollout, seeds)``, rollout calling play)."""
    settings = {
        "AGENTTRACE_TARGETS": "train:play=episode[seed=seed];"
        "gymnasium.core:Env.reset=env.reset;gymnasium.core:Env.step=env.step"
    }
    runs = {method: run(tmp_path, "pool", method, **settings) for method in METHODS}
    seen, forked, _ = runs["fork"]
    expected = {key: [comparable(t) for t in group] for key, group in forked.items()}
    for method, (seen_there, groups, _) in runs.items():
        assert seen_there == seen, method
        assert sorted(groups) == [SEED + i for i in range(4)], method
        for i, episode in enumerate(seen):
            (trajectory,) = groups[SEED + i]
            assert trajectory.status == episode["end"]
            assert [(s.action, s.reward) for s in trajectory.steps] == [
                (action, reward) for _, action, reward in episode["steps"]
            ]
            for step, (observation, *_) in zip(trajectory.steps, episode["steps"], strict=True):
                np.testing.assert_array_equal(np.asarray(step.observation, float), observation)
        assert {key: [comparable(t) for t in group] for key, group in groups.items()} == (
            expected
        ), method


def test_instrumenting_in_code_does_not_reach_spawned_workers(tmp_path) -> None:
    """``instrument_gymnasium()`` in code (no opentelemetry-instrument): a spawned worker is
    a fresh interpreter that never ran it. ``make_vec``'s sub-environments are still all
    recorded here, from the batched results; those of a vector env built by hand run
    untraced in their workers (nothing recorded, no crash): docs/env-wrappers.md says so."""
    out = tmp_path / "runs"
    done = run_script(tmp_path, LOOP, "make_vec", "spawn", "code", AGENTTRACE_OUT=str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    trajectories = load_trajectories(sorted(out.glob("*/trajectories.jsonl")))
    groups: dict[int, list[at.Trajectory]] = {}
    for trajectory in sorted(trajectories, key=lambda t: t.start_time):
        groups.setdefault(trajectory.attributes[sc.ENV_INDEX], []).append(trajectory)
    check_against_loop(json.loads(done.stdout), groups, sc.STATUS_ABORTED)
    out = tmp_path / "by-hand"
    done = run_script(tmp_path, LOOP, "by_hand", "spawn", "code", AGENTTRACE_OUT=str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)  # the loop ran
    assert list(out.glob("*/trajectories.jsonl")) == []


def test_the_loop_plays_the_same_without_agenttrace(tmp_path) -> None:
    """The script without agenttrace at all sees what it sees under agenttrace."""
    plain = run_script(tmp_path, LOOP, "by_hand", "spawn")
    assert plain.returncode == 0, plain.stderr[-3000:]
    seen, _, _ = run(tmp_path, "by_hand", "spawn", AGENTTRACE_GYMNASIUM="1")
    assert json.loads(plain.stdout) == seen

"""Minari datasets from trajectories: what Minari's own ``DataCollector`` records, episode for
episode.

Minari (the Farama Foundation's offline-RL dataset format) stores per episode the
observations (the reset's, then each step's: one more than actions), actions, rewards,
terminations, truncations, optional infos, and the reset's seed. A trajectory holds exactly
that: each step's observation acted on, the final observation, the flags, ``rl.episode.seed``.
An episode that did not end (aborted, incomplete) gets ``truncated`` on its last step, as
``DataCollector`` does for the episode in progress when the dataset is written; an episode
with no steps, or with steps missing, cannot be a Minari episode and is skipped (counted).

The dataset is written with Minari's public API (``create_dataset_from_buffers``, then
``update_dataset_from_buffer`` for every later batch), into Minari's datasets folder
(``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``). Spaces come from the environment
(``env=`` a registered gymnasium id, else the trajectories' ``rl.env.name`` when gymnasium
knows it), else from ``observation_space=``/``action_space=``, else they are inferred from
the values (docs/minari.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agenttrace import semconv as sc
from agenttrace._version import install_hint
from agenttrace.trajectory.model import Trajectory

logger = logging.getLogger("agenttrace")

#: Episodes buffered before they are written to the dataset.
EPISODES_PER_WRITE = 64


class MinariSpacesError(ValueError):
    """The dataset's spaces cannot be known: no environment, no spaces given, and values no
    gymnasium space holds (text, chat messages). Nothing can be written; the message says
    what to give instead."""


def _minari() -> Any:
    try:
        import minari
    except ImportError as exc:
        raise ImportError(
            "Minari datasets need minari with HDF5: " + install_hint("minari")
        ) from exc
    return minari


def why_not_minari(trajectory: Trajectory) -> str | None:
    """Why the trajectory cannot be a Minari episode, or None when it can."""
    if not trajectory.steps:
        return "it has no steps"
    if trajectory.missing_steps:
        return f"steps {trajectory.missing_steps[:5]} never arrived"
    failed = next((step for step in trajectory.steps if step.error is not None), None)
    if failed is not None:
        return f"step {failed.index} failed ({failed.error}): it has no outcome"
    if trajectory.final_observation is None:
        return "its final observation was not recorded"
    if any(step.observation is None or step.action is None for step in trajectory.steps):
        return "a step has no observation or no action"
    return None


def _stacked(values: Sequence[Any]) -> Any:
    """A list of (possibly nested dict) values as a dict of lists, the layout Minari's
    episode buffers use for Dict spaces."""
    first = values[0]
    if isinstance(first, dict):
        return {key: _stacked([value[key] for value in values]) for key in first}
    return list(values)


def episode_buffer(trajectory: Trajectory, *, record_infos: bool = False) -> Any:
    """The trajectory as a Minari ``EpisodeBuffer`` (ValueError when it cannot be one)."""
    why = why_not_minari(trajectory)
    if why is not None:
        raise ValueError(f"episode {trajectory.episode_id!r} cannot be a Minari episode: {why}")
    from minari.data_collector import EpisodeBuffer

    steps = trajectory.steps
    terminations = [bool(step.terminated) for step in steps]
    truncations = [bool(step.truncated) for step in steps]
    if not (terminations[-1] or truncations[-1]):
        truncations[-1] = True  # (DataCollector's rule for an episode that did not end)
    infos = None
    if record_infos:
        reset_info = trajectory.reset_info if isinstance(trajectory.reset_info, dict) else {}
        every = [reset_info, *(step.info if isinstance(step.info, dict) else {} for step in steps)]
        if all(info.keys() == every[0].keys() for info in every):
            infos = _stacked(every) if every[0] else {}
    seed = trajectory.attributes.get(sc.EPISODE_SEED)
    return EpisodeBuffer(
        seed=seed if type(seed) is int else None,
        observations=_stacked(
            [*(step.observation for step in steps), trajectory.final_observation]
        ),
        actions=_stacked([step.action for step in steps]),
        rewards=[0.0 if step.reward is None else float(step.reward) for step in steps],
        terminations=terminations,
        truncations=truncations,
        infos=infos if infos is not None else {},
    )


def infer_space(values: Sequence[Any]) -> Any:
    """A gymnasium space that holds every value: Box for arrays and floats, Discrete for
    non-negative integers, Dict for dicts of those (ValueError for anything else)."""
    from gymnasium import spaces

    first = values[0]
    if isinstance(first, dict):
        return spaces.Dict({key: infer_space([v[key] for v in values]) for key in first})
    array = np.asarray(values)
    if array.dtype.kind in "iu" and array.ndim == 1 and array.min() >= 0:
        return spaces.Discrete(int(array.max()) + 1)
    if array.dtype.kind == "b":
        return spaces.MultiBinary(array.shape[1:] or 1)
    if array.dtype.kind in "iuf" and array.dtype != object:
        shape = array.shape[1:]
        if array.dtype.kind == "f":
            return spaces.Box(-np.inf, np.inf, shape, array.dtype)
        return spaces.Box(array.min(), array.max(), shape, array.dtype)
    raise ValueError(
        f"cannot infer a space for values like {first!r}; give the environment id or the spaces"
    )


def _inferred(values: Sequence[Any], what: str) -> Any:
    """:func:`infer_space` of the episodes' ``what``, or MinariSpacesError saying what to give."""
    try:
        return infer_space(values)
    except ValueError:
        first = values[0] if values else None
        while isinstance(first, dict) and first:  # (the value a Dict space could not hold)
            first = next(iter(first.values()))
        raise MinariSpacesError(
            f"Minari needs a gymnasium space for the {what}, and none holds values like "
            f"{_short(first)} ({type(first).__name__}): give a registered gymnasium env id "
            "(--env ID, or env=) or the spaces (observation_space=, action_space=); text and "
            "chat episodes belong in step tables or chat rows (--format steps, --format chat)"
        ) from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


#: Minari's notes about metadata nobody gave (author, code_permalink, ...): not for the user.
_METADATA_NOTE = "is set to None"
_said: set[str] = set()


@contextlib.contextmanager
def _minari_warnings(dataset_id: str) -> Iterator[None]:
    """Minari's own warnings during a call, routed: its notes about unset metadata go to the
    debug log; any other is one line on the ``agenttrace`` logger, once per message."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        text = str(warning.message).split("\n", 1)[0]
        if _METADATA_NOTE in text:
            logger.debug("agenttrace: Minari dataset %s: %s", dataset_id, text)
        elif text not in _said:
            _said.add(text)
            logger.warning("agenttrace: Minari dataset %s: Minari says: %s", dataset_id, text)


def _registered(env_name: Any) -> bool:
    if not isinstance(env_name, str):
        return False
    try:
        import gymnasium

        gymnasium.spec(env_name)
    except Exception:
        return False
    return True


class MinariSink:
    """Writes trajectories into the Minari dataset ``dataset_id`` as episodes finish.

    ``env``: a registered gymnasium id whose spaces and spec the dataset records (default:
    the first trajectory's ``rl.env.name``, if gymnasium knows it); otherwise
    ``observation_space``/``action_space``, otherwise spaces inferred from the first
    episodes written. A dataset with that id must not exist yet.
    """

    def __init__(
        self,
        dataset_id: str,
        *,
        root: str | os.PathLike | None = None,
        env: str | None = None,
        observation_space: Any = None,
        action_space: Any = None,
        record_infos: bool = False,
        episodes_per_write: int = EPISODES_PER_WRITE,
        description: str | None = None,
    ) -> None:
        minari = _minari()
        self.root = None if root is None else os.fspath(root)
        with _datasets_root(self.root):
            exists = dataset_id in minari.list_local_datasets()
        if exists:
            raise ValueError(f"a Minari dataset {dataset_id!r} exists already; choose another id")
        self.dataset_id = dataset_id
        self.env = env
        self.observation_space = observation_space
        self.action_space = action_space
        self.record_infos = record_infos
        self.episodes_per_write = max(1, episodes_per_write)
        self.description = description
        self.skipped = 0  # trajectories that could not be Minari episodes
        #: Log the first one left out (the export command names them itself).
        self.log_skips = True
        self._pending: list[tuple[Any, Trajectory]] = []
        self._dataset: Any = None
        self._closed = False

    def write(self, trajectory: Trajectory) -> None:
        """Buffer one episode. One that cannot be a Minari episode (no steps, steps missing)
        is skipped and counted in ``skipped``; the first is logged with the reason."""
        if self._closed:
            raise RuntimeError(f"MinariSink({self.dataset_id!r}) is closed; cannot write")
        why = why_not_minari(trajectory)
        if why is not None:
            self.skipped += 1
            if self.skipped == 1 and self.log_skips:
                logger.warning(
                    "agenttrace: Minari dataset %s: episode %s is left out: %s (later ones are "
                    "counted)",
                    self.dataset_id,
                    trajectory.episode_id,
                    why,
                )
            return
        buffer = episode_buffer(trajectory, record_infos=self.record_infos)
        self._pending.append((buffer, trajectory))
        if len(self._pending) >= self.episodes_per_write:
            self.flush()

    def flush(self) -> None:
        """Write the buffered episodes to the dataset (creating it with the first ones)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        buffers = [buffer for buffer, _ in pending]
        with _datasets_root(self.root):
            if self._dataset is None:
                self._dataset = self._create(buffers, [trajectory for _, trajectory in pending])
            else:
                with _minari_warnings(self.dataset_id):
                    self._dataset.update_dataset_from_buffer(buffers)

    def _create(self, buffers: list[Any], trajectories: list[Trajectory]) -> Any:
        minari = _minari()
        env = self.env
        if env is None and self.observation_space is None:
            name = trajectories[0].attributes.get(sc.ENV_NAME)
            env = name if _registered(name) else None
        observation_space, action_space = self.observation_space, self.action_space
        if env is None:
            steps = [step for trajectory in trajectories for step in trajectory.steps]
            if observation_space is None:
                observations = [step.observation for step in steps]
                observations += [t.final_observation for t in trajectories]
                observation_space = _inferred(observations, "observations")
            if action_space is None:
                action_space = _inferred([step.action for step in steps], "actions")
        with _minari_warnings(self.dataset_id):
            return minari.create_dataset_from_buffers(
                self.dataset_id,
                buffers,
                env=env,
                observation_space=observation_space,
                action_space=action_space,
                algorithm_name="agenttrace",
                description=self.description,
            )

    def close(self) -> None:
        """Write what is buffered, then each episode's reward statistics (the metadata
        ``DataCollector`` adds: rewards_sum, _mean, _std, _min, _max); later writes raise."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        if self._dataset is not None:
            from minari.data_collector.callbacks import EpisodeMetadataCallback

            storage = self._dataset.storage
            with _minari_warnings(self.dataset_id):
                storage.update_episode_metadata(storage.apply(EpisodeMetadataCallback()))

    def delete(self) -> None:
        """Delete the dataset this sink created (nothing else)."""
        if self._dataset is not None:
            with _datasets_root(self.root):
                _minari().delete_dataset(self.dataset_id)
            self._dataset = None

    @property
    def dataset(self) -> Any:
        """The ``MinariDataset`` written so far (None before the first flush)."""
        return self._dataset

    def __repr__(self) -> str:
        return f"MinariSink({self.dataset_id!r})"


class MinariExport:
    """The Minari dataset of ``agenttrace export --format minari``, under ``root`` (Minari's
    datasets folder; default: ``MINARI_DATASETS_PATH``). A dataset the export started is
    deleted again when it fails (:meth:`discard`); ``force`` deletes one already there."""

    def __init__(
        self,
        dataset_id: str,
        *,
        root: str | os.PathLike | None = None,
        env: str | None = None,
        force: bool = False,
    ) -> None:
        self.rows = 0
        root = None if root is None else os.fspath(root)
        minari = _minari()
        with _datasets_root(root):
            if dataset_id in minari.list_local_datasets():
                if not force:
                    raise ValueError(
                        f"a Minari dataset {dataset_id!r} exists already; choose another id, "
                        "or --force to replace it"
                    )
                minari.delete_dataset(dataset_id)
        self._sink = MinariSink(dataset_id, root=root, env=env)
        self._sink.log_skips = False  # (the export's summary names the episodes left out)

    @property
    def skipped(self) -> int:
        return self._sink.skipped

    def write(self, trajectory: Trajectory) -> None:
        self._sink.write(trajectory)
        self.rows += len(trajectory.steps)

    def close(self) -> Path:
        """Write what is left; the dataset's folder."""
        self._sink.close()
        dataset = self._sink.dataset
        if dataset is None:
            raise ValueError("no episode could be a Minari episode; no dataset written")
        return Path(dataset.storage.data_path).parent

    def discard(self) -> None:
        """Delete the dataset this export started (nothing else)."""
        self._sink.delete()


@contextlib.contextmanager
def _datasets_root(root: str | None) -> Iterator[None]:
    """Minari's calls with ``MINARI_DATASETS_PATH`` = ``root`` (Minari reads the variable on
    every call; None: as it is)."""
    if root is None:
        yield
        return
    before = os.environ.get(_ROOT_VARIABLE)
    os.environ[_ROOT_VARIABLE] = root
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_ROOT_VARIABLE, None)
        else:
            os.environ[_ROOT_VARIABLE] = before


def check_minari_arguments(dataset_id: str | None) -> None:
    """ValueError naming what is wrong with ``--dataset-id`` (before any work starts);
    ImportError when minari is not installed."""
    if not dataset_id:
        raise ValueError("--format minari needs --dataset-id NAMESPACE/NAME-v0")
    _minari()
    from minari.dataset.minari_dataset import parse_dataset_id

    parse_dataset_id(dataset_id)  # ValueError: "Malformed dataset ID ..."


_ROOT_VARIABLE = "MINARI_DATASETS_PATH"

__all__ = [
    "MinariExport",
    "MinariSink",
    "MinariSpacesError",
    "check_minari_arguments",
    "episode_buffer",
    "infer_space",
    "why_not_minari",
]

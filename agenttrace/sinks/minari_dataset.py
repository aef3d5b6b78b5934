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
(``env=`` a gymnasium id, ``module:EnvId`` imports its package; else the trajectories'
``rl.env.name`` when this process can find it), else from ``observation_space=``/
``action_space=``, else they are inferred from the values (:mod:`.minari_spaces`,
docs/minari.md). Infos are stored as ``DataCollector(record_infos=True)`` stores them.
``agenttrace export`` builds its dataset in a hidden folder beside the target and moves it
into place at the end (:class:`MinariExport`): a failed export leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc
from agenttrace._version import install_hint
from agenttrace.sinks.minari_spaces import (
    MinariDatasetError,
    MinariEnvError,
    MinariSpacesError,
    StructureError,
    check_storable,
    environment_spaces,
    environment_spec,
    infer_space,
    inferred,
    recorded_spec,
    stacked,
    structure,
)
from agenttrace.trajectory.model import Trajectory

logger = logging.getLogger("agenttrace")

#: Episodes buffered before they are written to the dataset.
EPISODES_PER_WRITE = 64


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


def episode_infos(trajectory: Trajectory) -> tuple[dict, str | None]:
    """The episode's infos as ``DataCollector(record_infos=True)`` keeps them (the reset's,
    then each step's, stacked), and None; or ``{}`` and why they cannot be kept (their
    structure changes from step to step, which DataCollector cannot record either)."""
    reset_info = trajectory.reset_info if isinstance(trajectory.reset_info, dict) else {}
    every = [reset_info, *(s.info if isinstance(s.info, dict) else {} for s in trajectory.steps)]
    try:
        return stacked(every), None
    except StructureError as exc:
        return {}, f"its infos change structure from step to step ({exc})"


def episode_buffer(trajectory: Trajectory, *, record_infos: bool = True) -> Any:
    """The trajectory as a Minari ``EpisodeBuffer`` (ValueError when it cannot be one)."""
    return _buffer(trajectory, record_infos)[0]


def _buffer(trajectory: Trajectory, record_infos: bool) -> tuple[Any, str | None]:
    """(the EpisodeBuffer, why its infos were left out or None)."""
    why = why_not_minari(trajectory)
    if why is not None:
        raise ValueError(f"episode {trajectory.episode_id!r} cannot be a Minari episode: {why}")
    from minari.data_collector import EpisodeBuffer

    steps = trajectory.steps
    terminations = [bool(step.terminated) for step in steps]
    truncations = [bool(step.truncated) for step in steps]
    if not (terminations[-1] or truncations[-1]):
        truncations[-1] = True  # (DataCollector's rule for an episode that did not end)
    infos, infos_problem = episode_infos(trajectory) if record_infos else ({}, None)
    seed = trajectory.attributes.get(sc.EPISODE_SEED)
    try:
        observations = stacked(
            [*(step.observation for step in steps), trajectory.final_observation]
        )
        actions = stacked([step.action for step in steps])
    except StructureError as exc:
        raise ValueError(
            f"episode {trajectory.episode_id!r} cannot be a Minari episode: its values change "
            f"structure from step to step ({exc})"
        ) from None
    buffer = EpisodeBuffer(
        seed=seed if type(seed) is int else None,
        observations=observations,
        actions=actions,
        rewards=[0.0 if step.reward is None else float(step.reward) for step in steps],
        terminations=terminations,
        truncations=truncations,
        infos=infos,
    )
    return buffer, infos_problem


#: Minari's notes about metadata nobody gave (author, code_permalink, ..., the env spec of a
#: dataset whose spaces were given or inferred): not for the user.
_METADATA_NOTES = ("is set to None", "env_spec is None")
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
        if any(note in text for note in _METADATA_NOTES):
            logger.debug("agenttrace: Minari dataset %s: %s", dataset_id, text)
        elif text not in _said:
            _said.add(text)
            logger.warning("agenttrace: Minari dataset %s: Minari says: %s", dataset_id, text)


class MinariSink:
    """Writes trajectories into the Minari dataset ``dataset_id`` as episodes finish.

    ``env``: a gymnasium id whose spaces and spec the dataset records (``module:EnvId``
    imports ``module`` first; default: the first trajectory's ``rl.env.name``, when this
    process can find it); otherwise ``observation_space``/``action_space``, otherwise spaces
    inferred from the first episodes written. ``record_infos``: store each episode's infos
    (the reset's and every step's) as ``DataCollector(record_infos=True)`` does. A dataset
    with that id must not exist yet.
    """

    def __init__(
        self,
        dataset_id: str,
        *,
        root: str | os.PathLike | None = None,
        env: str | None = None,
        observation_space: Any = None,
        action_space: Any = None,
        record_infos: bool = True,
        episodes_per_write: int = EPISODES_PER_WRITE,
        description: str | None = None,
    ) -> None:
        _minari()
        self.root = None if root is None else os.fspath(root)
        if dataset_folder(dataset_id, self.root).exists():
            raise ValueError(f"a Minari dataset {dataset_id!r} exists already; choose another id")
        self.dataset_id = dataset_id
        self.env = env
        self._spec = environment_spec(env) if env else None  # (MinariEnvError: said now)
        self.observation_space = observation_space
        self.action_space = action_space
        self.record_infos = record_infos
        self.episodes_per_write = max(1, episodes_per_write)
        self.description = description
        self.skipped = 0  # trajectories that could not be Minari episodes
        self.infos_left_out = 0  # episodes written without their infos (structure changed)
        #: Log the first one left out (the export command names them itself).
        self.log_skips = True
        self._pending: list[tuple[Any, Trajectory]] = []
        self._structure: tuple[Any, Any] | None = None  # (observation, action), 1st episode
        self._known: tuple[Any, Any, Any, Any] | None = None  # (see _known_spaces)
        self._dataset: Any = None
        self._failed: MinariDatasetError | None = None
        self._closed = False

    def write(self, trajectory: Trajectory) -> None:
        """Buffer one episode. One that cannot be a Minari episode (no steps, steps missing)
        is skipped and counted in ``skipped``; the first is logged with the reason. One whose
        values are shaped unlike the first episode's raises ValueError (the others go on)."""
        if self._closed:
            raise RuntimeError(f"MinariSink({self.dataset_id!r}) is closed; cannot write")
        if self._failed is not None:
            raise self._failed
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
        if self._known is None:
            try:
                self._known = self._known_spaces(trajectory)
            except MinariDatasetError as exc:
                self._failed = exc
                raise
        buffer, infos_problem = _buffer(trajectory, self.record_infos)
        shape = (structure(trajectory.steps[0].observation), structure(trajectory.steps[0].action))
        if self._structure is None:
            self._structure = shape
        elif shape != self._structure:
            what = "observations" if shape[0] != self._structure[0] else "actions"
            raise ValueError(
                f"episode {trajectory.episode_id!r} cannot be in the Minari dataset: its "
                f"{what} are nested unlike the first episode's (other keys or tuple lengths)"
            )
        if infos_problem is not None:
            self.infos_left_out += 1
            if self.infos_left_out == 1:
                logger.warning(
                    "agenttrace: Minari dataset %s: episode %s is written without infos: %s "
                    "(later ones are counted)",
                    self.dataset_id,
                    trajectory.episode_id,
                    infos_problem,
                )
        self._pending.append((buffer, trajectory))
        if len(self._pending) >= self.episodes_per_write:
            self.flush()

    def flush(self) -> None:
        """Write the buffered episodes to the dataset (creating it with the first ones).

        MinariDatasetError when the dataset cannot be written at all (its spaces cannot be
        known, or Minari refuses it); later writes raise it again."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        buffers = [buffer for buffer, _ in pending]
        try:
            with _datasets_root(self.root):
                if self._dataset is None:
                    self._dataset = self._create(buffers, [trajectory for _, trajectory in pending])
                else:
                    with _minari_warnings(self.dataset_id):
                        self._dataset.update_dataset_from_buffer(buffers)
        except MinariDatasetError as exc:
            self._failed = exc
            raise
        except Exception as exc:  # (Minari's own: any type, said in one line)
            self._failed = MinariDatasetError(
                f"Minari could not write the dataset {self.dataset_id!r}: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            )
            raise self._failed from exc

    def _known_spaces(self, trajectory: Trajectory) -> tuple[Any, Any, Any, Any]:
        """(env spec or None, observation space, action space, the recorded env name) as far
        as they are known before any value is read: the env given, the spaces given, the
        env recorded at run time (``rl.env.spec``, ``rl.env.name``). None: to be inferred.
        A known space Minari cannot store is refused here, before any episode is buffered."""
        observation_space, action_space = self.observation_space, self.action_space
        spec = self._spec
        attributes = trajectory.attributes
        recorded = attributes.get(sc.ENV_NAME)
        if spec is None and (observation_space is None or action_space is None):
            spec = recorded_spec(recorded, attributes.get(sc.ENV_SPEC))
        if spec is not None and (observation_space is None or action_space is None):
            try:
                made = environment_spaces(spec)
            except MinariEnvError:
                if self._spec is not None:  # (the env given must work)
                    raise
                spec, made = None, (None, None)  # (recorded, but cannot be made here)
            if observation_space is None:
                observation_space = made[0]
            if action_space is None:
                action_space = made[1]
        for space, what in ((observation_space, "observations"), (action_space, "actions")):
            if space is not None:
                check_storable(space, what)
        return spec, observation_space, action_space, None if spec is not None else recorded

    def _spaces(self, trajectories: list[Trajectory]) -> tuple[Any, Any, Any]:
        """(env spec or None, observation space, action space) of the dataset: the known
        ones, the others inferred from the values of ``trajectories``."""
        assert self._known is not None
        spec, observation_space, action_space, unknown = self._known
        steps = [step for trajectory in trajectories for step in trajectory.steps]
        if observation_space is None:
            observations = [step.observation for step in steps]
            observations += [t.final_observation for t in trajectories]
            observation_space = inferred(observations, "observations", unknown)
            check_storable(observation_space, "observations")
        if action_space is None:
            action_space = inferred([step.action for step in steps], "actions", unknown)
            check_storable(action_space, "actions")
        return spec, observation_space, action_space

    def _create(self, buffers: list[Any], trajectories: list[Trajectory]) -> Any:
        minari = _minari()
        spec, observation_space, action_space = self._spaces(trajectories)
        if spec is not None:
            try:
                spec.to_json()
            except ValueError:  # (an entry point that is a callable: Minari cannot record it)
                spec = None
        folder = dataset_folder(self.dataset_id)
        try:
            with _minari_warnings(self.dataset_id):
                return minari.create_dataset_from_buffers(
                    self.dataset_id,
                    buffers,
                    env=spec,
                    observation_space=observation_space,
                    action_space=action_space,
                    algorithm_name="agenttrace",
                    description=self.description,
                )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # (it was not there before: ours)
            raise

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
            shutil.rmtree(dataset_folder(self.dataset_id, self.root), ignore_errors=True)
            self._dataset = None

    @property
    def dataset(self) -> Any:
        """The ``MinariDataset`` written so far (None before the first flush)."""
        return self._dataset

    def __repr__(self) -> str:
        return f"MinariSink({self.dataset_id!r})"


class MinariExport:
    """The Minari dataset of ``agenttrace export --format minari``, under ``root`` (Minari's
    datasets folder; default: ``MINARI_DATASETS_PATH``), whole or not at all.

    The dataset is built in a hidden folder beside it (``.agenttrace-*.partial``, which
    Minari does not list) and moved into place by :meth:`close`; :meth:`discard` removes the
    hidden folder, so a failed export leaves nothing behind. ``force`` replaces a dataset
    already there (also a broken one), and never a folder that is not a Minari dataset.
    """

    def __init__(
        self,
        dataset_id: str,
        *,
        root: str | os.PathLike | None = None,
        env: str | None = None,
        force: bool = False,
        record_infos: bool = True,
    ) -> None:
        self.rows = 0
        _minari()
        self.dataset_id = dataset_id
        self.root = datasets_root(root)
        self.target = self.root / dataset_id
        if self.target.exists() or self.target.is_symlink():
            if not force:
                raise ValueError(
                    f"a Minari dataset {dataset_id!r} exists already; choose another id, "
                    "or --force to replace it"
                )
            if not _replaceable(self.target):
                raise ValueError(
                    f"{str(self.target)!r} exists and is not a Minari dataset; choose another "
                    "id (it is never replaced)"
                )
        self.root.mkdir(parents=True, exist_ok=True)
        self.staging = Path(
            tempfile.mkdtemp(prefix=".agenttrace-", suffix=".partial", dir=self.root)
        )
        try:
            self._sink = MinariSink(
                dataset_id, root=self.staging, env=env, record_infos=record_infos
            )
        except BaseException:
            shutil.rmtree(self.staging, ignore_errors=True)
            raise
        self._sink.log_skips = False  # (the export's summary names the episodes left out)

    @property
    def skipped(self) -> int:
        return self._sink.skipped

    @property
    def infos_left_out(self) -> int:
        return self._sink.infos_left_out

    def write(self, trajectory: Trajectory) -> None:
        self._sink.write(trajectory)
        self.rows += len(trajectory.steps)

    def close(self) -> Path:
        """Write what is left and move the dataset into place; the dataset's folder."""
        self._sink.close()
        if self._sink.dataset is None:
            raise ValueError("no episode could be a Minari episode; no dataset written")
        built = self.staging / self.dataset_id
        self._namespace()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        if self.target.exists() or self.target.is_symlink():
            old = self.target.with_name(f".{self.target.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(self.target, old)
            os.replace(built, self.target)
            _remove(old)
        else:
            os.replace(built, self.target)
        shutil.rmtree(self.staging, ignore_errors=True)
        return self.target

    def _namespace(self) -> None:
        """The dataset's namespace in the real folder, as Minari creates it (its metadata)."""
        from minari.dataset.minari_dataset import parse_dataset_id
        from minari.namespace import create_namespace, list_local_namespaces

        namespace = parse_dataset_id(self.dataset_id)[0]
        if namespace is None:
            return
        with _datasets_root(str(self.root)), _minari_warnings(self.dataset_id):
            if namespace not in list_local_namespaces():
                with contextlib.suppress(ValueError):
                    create_namespace(namespace)

    def discard(self) -> None:
        """Remove what this export built (nothing else)."""
        shutil.rmtree(self.staging, ignore_errors=True)


def datasets_root(root: str | os.PathLike | None = None) -> Path:
    """Minari's datasets folder: ``root``, else ``MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets`` (Minari's own rule)."""
    if root is not None:
        return Path(root)
    return Path(os.environ.get(_ROOT_VARIABLE) or Path.home() / ".minari" / "datasets")


def dataset_folder(dataset_id: str, root: str | os.PathLike | None = None) -> Path:
    """The folder Minari keeps the dataset ``dataset_id`` in."""
    return datasets_root(root) / dataset_id


def _replaceable(folder: Path) -> bool:
    """Whether ``folder`` is a Minari dataset (whole or broken): ``data/`` and Minari's files
    only, or empty. Anything else is never replaced."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return all(entry.name in ("data", "metadata.json") for entry in folder.iterdir())


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().split("\n", 1)[0]
    return text if len(text) <= 200 else text[:197] + "..."


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


def check_minari_arguments(dataset_id: str | None, env: str | None = None) -> None:
    """ValueError naming what is wrong with ``--dataset-id`` or ``--env`` (before any work
    starts: ``--env`` imports the package that registers it); ImportError when minari is
    not installed."""
    if not dataset_id:
        raise ValueError("--format minari needs --dataset-id NAMESPACE/NAME-v0")
    _minari()
    from minari.dataset.minari_dataset import parse_dataset_id

    parse_dataset_id(dataset_id)  # ValueError: "Malformed dataset ID ..."
    if env:
        environment_spec(env)  # MinariEnvError: one line, what to give


_ROOT_VARIABLE = "MINARI_DATASETS_PATH"

__all__ = [
    "MinariDatasetError",
    "MinariEnvError",
    "MinariExport",
    "MinariSink",
    "MinariSpacesError",
    "check_minari_arguments",
    "dataset_folder",
    "datasets_root",
    "episode_buffer",
    "episode_infos",
    "infer_space",
    "why_not_minari",
]

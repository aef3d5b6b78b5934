"""Dataset selection for ``agenttrace export``: whole rollout groups, no duplicates, splits.

Each works on the stream of rebuilt episodes, after the episode filters (status, return, ...),
in bounded memory: the group gate holds the episodes of groups still open, the deduplicator
one digest per episode kept, the splitter nothing (an episode's part is a hash of its id or
its group's id and the seed, so a rerun, or another machine, puts it in the same part).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc
from agenttrace.sinks.names import split_suffix
from agenttrace.trajectory.model import Trajectory, content_json


def group_of(trajectory: Trajectory) -> tuple[str | None, int | None]:
    """(rl.group.id, rl.group.size) of an episode; (None, None) outside any group."""
    attributes = trajectory.attributes
    group = attributes.get(sc.GROUP_ID)
    size = attributes.get(sc.GROUP_SIZE)
    return (
        None if group is None else str(group),
        size if type(size) is int and size > 0 else None,
    )


@dataclass
class GroupGate:
    """Lets through only whole groups: a group goes out when ``rl.group.size`` of its
    episodes have arrived, or, with no size known, at the end of the input. Episodes of no
    group pass at once. What never completes is dropped and counted."""

    open: dict[str, list[Trajectory]] = field(default_factory=dict)
    incomplete_groups: int = 0
    dropped_episodes: int = 0

    def add(self, trajectory: Trajectory) -> list[Trajectory]:
        """The episodes released by this one (none while its group is open)."""
        group, size = group_of(trajectory)
        if group is None:
            return [trajectory]
        members = self.open.setdefault(group, [])
        members.append(trajectory)
        if size is not None and len(members) >= size:
            return self.open.pop(group)
        return []

    def finish(self) -> list[Trajectory]:
        """At the end: groups of no known size are complete; those with a size still short
        of it are dropped."""
        released: list[Trajectory] = []
        for members in self.open.values():
            _, size = group_of(members[0])
            if size is None:
                released.extend(members)
            else:
                self.incomplete_groups += 1
                self.dropped_episodes += len(members)
        self.open.clear()
        return released


@dataclass
class Deduplicator:
    """Keeps the first episode of each (task, actions): the same task solved by the same
    actions twice adds nothing to a dataset."""

    seen: set[bytes] = field(default_factory=set)
    duplicates: int = 0

    def is_new(self, trajectory: Trajectory) -> bool:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(str(trajectory.task_id).encode("utf-8", "backslashreplace") + b"\0")
        for step in trajectory.steps:
            digest.update(content_json(step, "action").encode("utf-8", "backslashreplace"))
            digest.update(b"\0")
        key = digest.digest()
        if key in self.seen:
            self.duplicates += 1
            return False
        self.seen.add(key)
        return True


_PART_NAME = re.compile(r"[A-Za-z0-9_]+")


@dataclass
class Splitter:
    """Assigns each episode to a named part (``train=0.9,test=0.1``), by episode or by group,
    from a hash of the seed and the id: reproducible, streaming, and a group never straddles
    two parts when split by group (episodes of no group are split by their own id)."""

    parts: list[tuple[str, float]]
    by: str = "episode"
    seed: int = 0

    @classmethod
    def parse(cls, text: str, *, by: str = "episode", seed: int = 0) -> Splitter:
        """``name=fraction,...`` whose fractions add up to 1; ValueError says what is wrong."""
        if by not in ("episode", "group"):
            raise ValueError(f"--split-by must be episode or group, not {by!r}")
        parts: list[tuple[str, float]] = []
        for item in text.split(","):
            name, sep, value = item.strip().partition("=")
            if not sep or not _PART_NAME.fullmatch(name.strip()):
                raise ValueError(
                    f"--split part {item.strip()!r} is not NAME=FRACTION (NAME: letters, digits, _)"
                )
            try:
                fraction = float(value)
            except ValueError:
                raise ValueError(
                    f"--split fraction {value!r} of {name!r} is not a number"
                ) from None
            if not 0 < fraction <= 1 or math.isnan(fraction):
                raise ValueError(f"--split fraction of {name!r} must be in (0, 1], got {value}")
            parts.append((name.strip(), fraction))
        names = [name for name, _ in parts]
        if len(set(names)) != len(names):
            raise ValueError(f"--split names a part twice: {', '.join(names)}")
        if abs(sum(f for _, f in parts) - 1.0) > 1e-9:
            raise ValueError(
                f"--split fractions add up to {sum(f for _, f in parts):g}, not 1: {text!r}"
            )
        return cls(parts, by=by, seed=seed)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.parts]

    def part_of(self, trajectory: Trajectory) -> str:
        key = trajectory.episode_id
        if self.by == "group":
            group, _ = group_of(trajectory)
            key = group if group is not None else key
        digest = hashlib.blake2b(f"{self.seed}\0{key}".encode(), digest_size=8).digest()
        position = int.from_bytes(digest, "big") / 2**64
        total = 0.0
        for name, fraction in self.parts:
            total += fraction
            if position < total:
                return name
        return self.parts[-1][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)


def part_outputs(
    target: Path, dataset_id: str | None, splitter: Splitter | None
) -> list[tuple[str | None, Path, str | None]]:
    """(part name, output path, Minari dataset id) of each output: one without --split, else
    one per part, named ``FILE`` with ``.NAME`` before its suffix (``data.train.jsonl``, a
    folder ``tables.train``) and Minari's ``NS/NAME-PART-vN``."""
    if splitter is None:
        return [(None, target, dataset_id)]
    outputs = []
    stem, suffix = split_suffix(target.name)
    for part in splitter.names:
        part_id = None
        if dataset_id is not None:
            base, dash, version = dataset_id.rpartition("-v")
            part_id = f"{base}-{part}{dash}{version}" if dash else f"{dataset_id}-{part}"
        outputs.append((part, target.with_name(f"{stem}.{part}{suffix}"), part_id))
    return outputs


class Selection:
    """Whole groups, no duplicates, then the split: the stream of kept episodes on its way
    to the writers (one per part). Left-out episodes are counted in ``filtered`` by reason,
    written ones in ``parts`` by part."""

    def __init__(
        self,
        emitters: dict[str | None, Callable[[Trajectory], Any]],
        *,
        filtered: Counter,
        parts: Counter,
        gate: GroupGate | None,
        deduplicator: Deduplicator | None,
        splitter: Splitter | None,
    ) -> None:
        self.emitters = emitters
        self.filtered = filtered
        self.parts = parts
        self.gate = gate
        self.deduplicator = deduplicator
        self.splitter = splitter

    def emit(self, trajectory: Trajectory) -> None:
        released = [trajectory] if self.gate is None else self.gate.add(trajectory)
        for episode in released:
            self._write(episode)

    def finish(self) -> None:
        if self.gate is None:
            return
        for episode in self.gate.finish():
            self._write(episode)
        if self.gate.dropped_episodes:
            self.filtered["incomplete group"] += self.gate.dropped_episodes

    def _write(self, trajectory: Trajectory) -> None:
        if self.deduplicator is not None and not self.deduplicator.is_new(trajectory):
            self.filtered["duplicate"] += 1
            return
        part = None if self.splitter is None else self.splitter.part_of(trajectory)
        if part is not None:
            self.parts[part] += 1
        self.emitters[part](trajectory)

"""Scores that come after the episode: a verifier, an LLM judge, a human label.

A score is a ``score`` span (``rl.score.name``, ``rl.score.value``, optional
``rl.score.step`` and ``rl.score.comment``, and the ``rl.episode.id`` it is about), so it
travels through every exporter and trace store like any span. A score the episode's own
rebuild sees becomes part of its trajectory; one that comes after the trajectory was written
is kept as a score record (a line of ``scores.jsonl``) that loaders merge by episode id.
Files are never rewritten.

What a score does to a trajectory (:func:`apply_scores`, the one implementation):

* ``trajectory.scores[name] = value`` (of several with one name, the latest wins);
* a score named ``reward`` is also a reward: it is added to the reward of step ``step`` (the
  last step when not given; a step without a reward counts as 0) and to the return.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agenttrace import semconv as sc
from agenttrace.trajectory.records import SpanRecord

#: The score name that is also a reward.
REWARD = "reward"
#: ``type`` of a score record in a scores file.
RECORD_TYPE = "score"


@dataclass(frozen=True)
class Score:
    episode_id: str
    name: str
    value: float
    step: int | None = None
    comment: str | None = None
    time: int | None = None  # Unix ns: when it was given (orders scores of one name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": RECORD_TYPE,
            "episode_id": self.episode_id,
            "name": self.name,
            "value": self.value,
            "step": self.step,
            "comment": self.comment,
            "time": self.time,
        }


def checked_score(
    episode_id: Any,
    value: Any,
    name: Any = REWARD,
    step: Any = None,
    comment: Any = None,
    time: Any = None,
) -> Score:
    """A Score from loose values; ValueError names the first field that is wrong."""
    if not isinstance(episode_id, str) or not episode_id:
        raise ValueError(f"a score's episode_id must be a non-empty string, got {episode_id!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a score's name must be a non-empty string, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"score {name!r}: value must be a number, got {value!r}") from None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond a float's range (10**400 read from JSON)
        raise ValueError(f"score {name!r}: value must be finite, got a huge integer") from None
    if not math.isfinite(value):
        raise ValueError(f"score {name!r}: value must be finite, got {value!r}")
    if step is not None and (type(step) is not int or step < 0):
        raise ValueError(f"score {name!r}: step must be an int >= 0, got {step!r}")
    if comment is not None and not isinstance(comment, str):
        raise ValueError(f"score {name!r}: comment must be a string, got {comment!r}")
    if time is not None and type(time) is not int:
        raise ValueError(f"score {name!r}: time must be an int (Unix ns), got {time!r}")
    return Score(episode_id, name, value, step, comment, time)


def score_from_dict(data: Mapping[str, Any]) -> Score:
    """A score record (a scores-file line); ValueError when it is not one."""
    if not isinstance(data, Mapping) or data.get("type") != RECORD_TYPE:
        raise ValueError('not a score record (no "type": "score")')
    return checked_score(
        data.get("episode_id"),
        data.get("value"),
        data.get("name", REWARD),
        data.get("step"),
        data.get("comment"),
        data.get("time"),
    )


def score_from_record(record: SpanRecord) -> Score:
    """The score a ``score`` span carries; ValueError names what is missing or wrong."""
    attributes = record.attributes
    return checked_score(
        attributes.get(sc.EPISODE_ID),
        attributes.get(sc.SCORE_VALUE),
        attributes.get(sc.SCORE_NAME, REWARD),
        attributes.get(sc.SCORE_STEP),
        attributes.get(sc.SCORE_COMMENT),
        record.end_time if record.end_time is not None else record.start_time,
    )


def apply_scores(trajectory: Any, scores: Iterable[Score]) -> None:
    """Apply ``scores`` (of this trajectory's episode) to it, in time order (module doc)."""
    ordered = sorted(scores, key=lambda s: (s.time is None, s.time or 0))
    for score in ordered:
        trajectory.scores[score.name] = score.value
        if score.name != REWARD:
            continue
        steps = trajectory.steps
        if isinstance(steps, list) and steps:
            index = score.step if score.step is not None else steps[-1].index
            target = next((s for s in reversed(steps) if s.index == index), None)
            if target is not None:
                target.reward = (target.reward or 0.0) + score.value
        trajectory.return_ = float(trajectory.return_) + score.value


__all__ = [
    "REWARD",
    "Score",
    "apply_scores",
    "checked_score",
    "score_from_dict",
    "score_from_record",
]

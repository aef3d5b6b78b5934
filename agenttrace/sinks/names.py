"""The names of the files agenttrace writes and reads: one list of suffixes, so an output's
side files (``data.scores.jsonl``) and split parts (``data.train.jsonl``) are named the same
way everywhere, and the names a run folder's trajectory files and folders go by."""

from __future__ import annotations

#: Longest first: ``.jsonl.gz`` before ``.jsonl``.
FILE_SUFFIXES = (".jsonl.gz", ".jsonl", ".ndjson", ".parquet", ".json")
#: The trajectory sinks' default file stem: a run folder's trajectory files start with it.
TRAJECTORIES_BASENAME = "trajectories"
#: The JSON-per-episode sink's folder inside a run folder (agenttrace.sinks.jsondir).
EPISODES_FOLDER = "episodes"


def split_suffix(name: str) -> tuple[str, str]:
    """``("data", ".jsonl.gz")`` for ``data.jsonl.gz``; ``(name, "")`` for another name."""
    lowered = name.lower()
    for suffix in FILE_SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], name[-len(suffix) :]
    return name, ""

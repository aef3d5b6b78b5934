"""The suffixes of the files agenttrace writes and reads, and a name split at them: one list,
so an output's side files (``data.scores.jsonl``) and split parts (``data.train.jsonl``) are
named the same way everywhere."""

from __future__ import annotations

#: Longest first: ``.jsonl.gz`` before ``.jsonl``.
FILE_SUFFIXES = (".jsonl.gz", ".jsonl", ".ndjson", ".parquet", ".json")


def split_suffix(name: str) -> tuple[str, str]:
    """``("data", ".jsonl.gz")`` for ``data.jsonl.gz``; ``(name, "")`` for another name."""
    lowered = name.lower()
    for suffix in FILE_SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], name[-len(suffix) :]
    return name, ""

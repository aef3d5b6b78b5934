"""Which trajectory files a source names, in reading order.

A source is a file, a run folder (its ``trajectories*`` files in write order), a folder of runs
such as ``agenttrace_runs/`` (the run written last at the end), a glob pattern, or a list of
those. A run that wrote several formats is read from one of them (JSONL first).
"""

from __future__ import annotations

import glob as _glob
import os
import re
from collections.abc import Iterable
from pathlib import Path

from agenttrace.sinks.names import EPISODES_FOLDER, TRAJECTORIES_BASENAME
from agenttrace.sinks.scores import is_score_file

#: File name endings the readers understand.
TRAJECTORY_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
#: Trajectory files in a run folder start with this; a folder holding any is read for only those.
RUN_FOLDER_PREFIX = TRAJECTORIES_BASENAME
#: Formats a run folder may hold the same episodes in, most preferred first: a run writing
#: to several sinks is read from one of them only.
_FORMATS = ((".jsonl", ".jsonl.gz"), (".parquet",), (".json",))

Source = str | os.PathLike | Iterable[str | os.PathLike]


def _has_suffix(path: Path) -> bool:
    return path.name.endswith(TRAJECTORY_SUFFIXES)


_ROTATED = re.compile(
    r"^(?P<base>.*?)(?:-(?P<n>\d{5,}))?(?P<ext>\.jsonl\.gz|\.jsonl|\.json|\.parquet)$"
)


def _file_order(path: Path) -> tuple:
    """Sort key that keeps a sink's files in write order.

    Plain name order would put ``trajectories-00001.jsonl`` before ``trajectories.jsonl``
    (``-`` sorts before ``.``), so the base name and its numbered continuations are compared
    as (base, number) with the unnumbered file first.
    """
    match = _ROTATED.match(path.name)
    if match is None:
        return (path.name, "", -1)
    number = match.group("n")
    return (match.group("base"), match.group("ext"), -1 if number is None else int(number))


def _has_glob_magic(text: str) -> bool:
    return any(char in text for char in "*?[")


def _one_format(files: list[Path]) -> list[Path]:
    """The files of the most preferred format present (a run with a JSONL and a Parquet sink
    holds every episode twice)."""
    for suffixes in _FORMATS:
        chosen = [p for p in files if p.name.endswith(suffixes)]
        if chosen:
            return chosen
    return files


def _files_of_folder(folder: Path, *, given: bool) -> list[Path]:
    """The trajectory files directly in ``folder``, in write order.

    A run folder's ``trajectories*`` files (one format); else, for the folder the user named
    or a run's ``episodes/`` folder, every trajectory file in it except span files.
    """
    try:
        found = sorted(
            (p for p in folder.iterdir() if _has_suffix(p) and p.is_file()), key=_file_order
        )
    except OSError:
        return []
    named = [p for p in found if p.name.startswith(RUN_FOLDER_PREFIX)]
    if named:
        return _one_format(named)
    if given or folder.name == EPISODES_FOLDER:
        return [p for p in found if not p.name.startswith("spans") and not is_score_file(p)]
    return []


def _newest_write(files: list[Path]) -> float:
    try:
        return max(p.stat().st_mtime for p in files)
    except (OSError, ValueError):
        return 0.0


def _expand_folder(folder: Path) -> list[Path]:
    """Every trajectory file under ``folder``: the folder's own, or else those of each run
    folder below it (a folder with trajectory files is not searched further), the run written
    last at the end."""
    groups: list[list[Path]] = []
    pending = [(folder, True)]
    while pending:
        current, given = pending.pop()
        files = _files_of_folder(current, given=given)
        if files:
            groups.append(files)
            continue
        try:
            children = sorted(p for p in current.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        pending.extend((child, False) for child in reversed(children))
    groups.sort(key=_newest_write)  # stable: ties keep folder name order
    return [path for group in groups for path in group]


def _no_files_in(folder: Path) -> FileNotFoundError:
    suffixes = ", ".join("*" + s for s in TRAJECTORY_SUFFIXES)
    message = f"no trajectory files ({suffixes}) in directory {str(folder)!r} or its run folders"
    if next(folder.glob("**/spans*.jsonl*"), None) is not None:
        message += (
            "; it holds span files (spans*.jsonl): rebuild trajectories from them with "
            f"agenttrace export --from {str(folder)!r} --out trajectories.jsonl"
        )
    return FileNotFoundError(message)


def expand_source(source: Source) -> list[Path]:
    """Every file a source names, in reading order; FileNotFoundError when there are none."""
    if isinstance(source, (str, os.PathLike)):
        items: list[str | os.PathLike] = [source]
    else:
        items = list(source)
        if not items:
            raise FileNotFoundError("no trajectory source given (empty list)")
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = _expand_folder(path)
            if not found:
                raise _no_files_in(path)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif isinstance(item, str) and _has_glob_magic(item):
            files.extend(_expand_pattern(item))
        else:
            raise FileNotFoundError(f"trajectory source {str(item)!r} does not exist")
    return files


def _expand_pattern(pattern: str) -> list[Path]:
    """A glob's files in (folder, write) order, then the trajectory files of its folders."""
    matched = [Path(p) for p in _glob.glob(pattern, recursive=True)]
    found = sorted((p for p in matched if p.is_file()), key=lambda p: (p.parent, *_file_order(p)))
    groups = [_expand_folder(p) for p in sorted(p for p in matched if p.is_dir())]
    groups.sort(key=_newest_write)
    found += [path for group in groups for path in group]
    if not found:
        raise FileNotFoundError(f"no files match the pattern {pattern!r}")
    return found

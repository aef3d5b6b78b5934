"""Safe file names for episode ids, and the readers that load trajectory files back.

Episode ids come from users and environments, so they may hold anything: ``/``, ``..``, NUL,
control characters, 10 000 characters. :func:`safe_filename` turns any id into one path
component that cannot leave its folder, and different ids into different names.

:func:`iter_trajectories` reads what the file sinks wrote (``*.jsonl``, ``*.jsonl.gz``,
``*.json``, ``*.parquet``). One bad record never costs the others: it becomes one
:class:`TrajectoryLoadError` handed to ``on_error`` (by default a warning) and reading goes on.
"""

from __future__ import annotations

import contextlib
import glob as _glob
import gzip
import hashlib
import json
import os
import re
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from agenttrace.sinks.scores import is_score_file, read_scores, score_files_for
from agenttrace.trajectory.model import Trajectory
from agenttrace.trajectory.scores import Score, apply_scores

#: Longest kept part of an id in a file name (before the hash and suffix).
MAX_NAME_CHARS = 120
#: Hex digits of sha1 appended when a name had to be changed or cut.
HASH_CHARS = 16

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# A name that already ends like one of our hash tags is tagged again, so an id can never
# pose as the changed form of another id.
_LOOKS_TAGGED = re.compile(r"-[0-9a-f]{%d}$" % HASH_CHARS)
_SAFE_SUFFIX = re.compile(r"[A-Za-z0-9._-]*")
# Device names Windows reserves whatever the extension.
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL"}
    | {f"COM{i}" for i in range(1, 10)}
    | {f"LPT{i}" for i in range(1, 10)}
)

#: File name endings the readers understand.
TRAJECTORY_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")

Source = str | os.PathLike | Iterable[str | os.PathLike]
ErrorHandler = Callable[["TrajectoryLoadError"], Any]


def safe_filename(name: str, *, suffix: str = "") -> str:
    """One path component for ``name`` that cannot escape its folder and never collides.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``; a leading dot, an empty name, a
    trailing dot, Windows device names and names over :data:`MAX_NAME_CHARS` are fixed too.
    Whenever anything was changed or cut, ``-`` and the first :data:`HASH_CHARS` hex digits
    of the sha1 of the original are appended, so two different ids never share a name. Names
    with upper-case letters are tagged the same way, so they stay distinct on case-insensitive
    file systems (macOS, Windows).
    """
    if not isinstance(name, str):
        raise TypeError(f"safe_filename needs a str, got {type(name).__name__}")
    if not _SAFE_SUFFIX.fullmatch(suffix) or suffix in (".", ".."):
        raise ValueError(f"unsafe file name suffix {suffix!r}")
    cleaned = _UNSAFE.sub("_", name)
    if cleaned.startswith("."):
        cleaned = "_" + cleaned[1:]
    if cleaned.endswith("."):
        cleaned = cleaned[:-1] + "_"
    if not cleaned:
        cleaned = "_"
    if cleaned.split(".", 1)[0].upper() in _WINDOWS_RESERVED:
        cleaned = "_" + cleaned
    cut = cleaned[:MAX_NAME_CHARS]
    changed = cut != name or _LOOKS_TAGGED.search(name) is not None or name.lower() != name
    if changed:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()
        cut = f"{cut}-{digest[:HASH_CHARS]}"
    return cut + suffix


def utf8_safe(text: str) -> str:
    """JSON text that encodes to UTF-8 even if it holds lone surrogates.

    ``json.dumps(..., ensure_ascii=False)`` keeps a lone surrogate (e.g. from a file name
    decoded with ``surrogateescape``) as a raw character, which UTF-8 cannot encode. Written
    as the JSON escape ``\\udcff`` instead, it decodes back to the same string (except a
    surrogate *pair* held as two code points, which comes back as the character it encodes).
    """
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def resolve_inside(folder: str | os.PathLike, name: str, *, suffix: str = "") -> Path:
    """``folder / safe_filename(name)``, checked to resolve inside ``folder``.

    The check also catches a symlink planted at that name pointing elsewhere.
    """
    base = Path(folder)
    path = base / safe_filename(name, suffix=suffix)
    resolved_base = base.resolve()
    resolved = path.resolve()
    if resolved.parent != resolved_base:
        raise ValueError(f"refusing to write {name!r}: {resolved} is outside {resolved_base}")
    return path


# --- reading -------------------------------------------------------------------------------


class TrajectoryLoadError(ValueError):
    """One record (or a whole file) that could not be loaded; says which file and where.

    ``line`` is the 1-based line of a JSONL file, the 0-based row of a Parquet file, or None
    when the whole file failed. ``torn`` is True for a record cut short by a crash mid-write.
    ``field`` is the path of the field that broke the schema (``length``,
    ``steps[2].llm_calls[0].finish_reasons``; see docs/trajectory-format.md, "Validation"),
    None when the record as a whole is unreadable. The record was skipped.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        line: int | None,
        message: str,
        *,
        torn: bool = False,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        self.torn = torn
        self.field = field
        super().__init__(self._text())

    def _text(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        if self.path.endswith(".parquet"):
            return f"{self.path}: row {self.line}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"

    def __reduce__(self) -> tuple:
        return (_rebuild_load_error, (self.path, self.line, self.message, self.torn, self.field))


def _rebuild_load_error(
    path: str, line: int | None, message: str, torn: bool, field: str | None = None
) -> TrajectoryLoadError:
    return TrajectoryLoadError(path, line, message, torn=torn, field=field)


def record_error(
    path: str | os.PathLike, line: int | None, exc: BaseException, *, prefix: str = ""
) -> TrajectoryLoadError:
    """The load error of one record that raised ``exc`` while it was read or rebuilt: a
    schema violation names its field, nesting past the recursion limit is said as such."""
    if isinstance(exc, RecursionError):
        message = "nested too deeply to read (over Python's recursion limit)"
    else:
        message = _describe(exc)
    return TrajectoryLoadError(path, line, prefix + message, field=getattr(exc, "field", None))


def warn_load_error(error: TrajectoryLoadError) -> None:
    """The default ``on_error``: a warning naming file and line, then reading goes on."""
    warnings.warn(str(error), UserWarning, stacklevel=3)


#: Trajectory files in a run folder start with this; a folder holding any is read for only those.
RUN_FOLDER_PREFIX = "trajectories"
#: The JSON-per-episode sink's folder inside a run folder (agenttrace.sinks.jsondir).
EPISODES_FOLDER = "episodes"
#: Formats a run folder may hold the same episodes in, most preferred first: a run writing
#: to several sinks is read from one of them only.
_FORMATS = ((".jsonl", ".jsonl.gz"), (".parquet",), (".json",))


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


def _expand(source: Source) -> list[Path]:
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


#: Called before a read starts. The pipeline registers its flush here, so that loading right
#: after a traced loop in the same process sees every episode that loop finished (sinks sit
#: below the pipeline, so it registers itself rather than being imported).
_before_reading: list[Callable[[], Any]] = []


def before_reading(hook: Callable[[], Any]) -> None:
    """Run ``hook`` before every :func:`iter_trajectories` (its failures are ignored)."""
    _before_reading.append(hook)


def _run_before_reading() -> None:
    for hook in _before_reading:
        # A flush that fails must not stop the user from reading what is there.
        with contextlib.suppress(Exception):
            hook()


def iter_trajectories(
    source: Source, *, on_error: ErrorHandler | None = None
) -> Iterator[Trajectory]:
    """Yield every trajectory in ``source``, skipping (and reporting) bad records.

    ``source`` is a file, a run folder (its ``trajectories*`` files in write order), a folder
    of runs such as ``agenttrace_runs/`` (every run folder under it, the run written last at
    the end), a glob pattern (of files or folders), or a list of those. A folder holding no
    ``trajectories*`` file is read for all its ``*.jsonl``, ``*.jsonl.gz``, ``*.json`` and
    ``*.parquet`` files; a run that wrote several formats is read from one (JSONL first).
    Each bad record gives one :class:`TrajectoryLoadError` to ``on_error`` (default: a
    warning); an ``on_error`` that raises stops the reading. A source naming no file raises
    FileNotFoundError at once.
    """
    report = on_error or warn_load_error
    _run_before_reading()
    if isinstance(source, (str, os.PathLike)):
        named = [Path(source)]
    elif isinstance(source, (list, tuple)):
        named = [Path(item) for item in source]
    else:  # (an iterator is used up by _expand: its files still bring the scores beside them)
        named = []
    files = _expand(source)  # before the first yield, so a bad source fails at the call
    score_files = score_files_for(named, files)
    scores = read_scores(score_files, report) if score_files else {}
    return _iter_files(files, report, scores)


def _iter_files(
    files: list[Path], report: ErrorHandler, scores: dict[str, list[Score]]
) -> Iterator[Trajectory]:
    """The trajectories of ``files``, with the late scores of each merged in."""
    for path in files:
        name = path.name
        if name.endswith(".parquet"):
            from agenttrace.sinks.parquet import read_parquet

            found = read_parquet(path, on_error=report)
        elif name.endswith(".json"):
            found = _read_json_file(path, report)
        else:
            found = _read_jsonl(path, report)
        if not scores:
            yield from found
            continue
        for trajectory in found:
            late = scores.get(trajectory.episode_id)
            if late:
                apply_scores(trajectory, late)
            yield trajectory


def load_trajectories(source: Source, *, on_error: ErrorHandler | None = None) -> list[Trajectory]:
    """All trajectories of ``source`` as a list; see :func:`iter_trajectories`."""
    return list(iter_trajectories(source, on_error=on_error))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError):
        return f"missing key {text}"
    return text or type(exc).__name__


def _read_jsonl(path: Path, report: ErrorHandler) -> Iterator[Trajectory]:
    opener = gzip.open if path.name.endswith(".gz") else open
    line_no = 0
    try:
        with opener(path, "rb") as handle:
            for raw in handle:
                line_no += 1
                ends_line = raw.endswith(b"\n")
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report(TrajectoryLoadError(path, line_no, f"not UTF-8 text: {exc}"))
                    continue
                try:
                    data = json.loads(text)
                except ValueError as exc:
                    report(_json_error(path, line_no, text, exc, last=not ends_line))
                    continue
                except RecursionError as exc:  # this record only, not the rest of the file
                    report(record_error(path, line_no, exc))
                    continue
                try:
                    trajectory = Trajectory.from_dict(data)
                except Exception as exc:  # one bad record never costs the others
                    report(record_error(path, line_no, exc))
                    continue
                yield trajectory
    except (OSError, EOFError, zlib.error) as exc:
        where = None if line_no == 0 else line_no + 1
        report(TrajectoryLoadError(path, where, f"cannot read file: {_describe(exc)}"))


def _json_error(
    path: Path, line_no: int, text: str, exc: ValueError, *, last: bool
) -> TrajectoryLoadError:
    if last:
        return TrajectoryLoadError(
            path,
            line_no,
            "torn last line (no trailing newline, incomplete JSON; the writer probably "
            f"stopped mid-write), skipped: {exc}",
            torn=True,
        )
    if _looks_truncated(text, exc):
        return TrajectoryLoadError(
            path,
            line_no,
            f"torn record (JSON ends early, left by an interrupted write), skipped: {exc}",
            torn=True,
        )
    return TrajectoryLoadError(path, line_no, f"not valid JSON: {exc}")


_LITERALS = ("true", "false", "null")
_NUMBER_TAIL = re.compile(r"-|[.eE][-+]?")


def _looks_truncated(text: str, exc: ValueError) -> bool:
    """True when the JSON error is "input ended early", the mark of a torn write."""
    if str(exc).startswith("Unterminated string"):
        return True
    position = getattr(exc, "pos", None)
    if position is None:
        return False
    rest = text.rstrip()[position:]
    return (
        rest == ""
        or any(word.startswith(rest) for word in _LITERALS)
        or _NUMBER_TAIL.fullmatch(rest) is not None
    )


def _read_json_file(path: Path, report: ErrorHandler) -> Iterator[Trajectory]:
    """A ``.json`` file holds one trajectory object, or a list of them."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        report(record_error(path, None, exc, prefix="cannot read JSON file: "))
        return
    if isinstance(data, list):
        for index, item in enumerate(data):
            try:
                yield Trajectory.from_dict(item)
            except Exception as exc:
                report(record_error(path, None, exc, prefix=f"item {index}: "))
        return
    try:
        yield Trajectory.from_dict(data)
    except Exception as exc:
        report(record_error(path, None, exc))

"""Exit codes of every ``agenttrace`` command, and how a failure is said: in one line.

One table for all commands (docs/cli.md, ``agenttrace --help``; a test checks both against
:data:`EXIT_CODES`). A command that fails prints ``agenttrace COMMAND: error: WHAT`` on stderr,
one line, never a traceback: argparse's own errors included (:class:`Parser`), and a missing
optional package named with the extra that installs it (:func:`missing_package`).
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import PackageNotFoundError, distribution
from typing import NoReturn

from agenttrace._version import DISTRIBUTION

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

#: (code, name, in short, when): the exit codes of every command.
EXIT_CODES = (
    (
        EXIT_OK,
        "ok",
        "done",
        "done, also when the filters leave no episode or the files hold none",
    ),
    (
        EXIT_FAILURE,
        "failed",
        "nothing usable was done; the one error line says why",
        "an input that does not exist, cannot be read or holds nothing usable; a backend "
        "that fails; a missing optional package (the line names it and its pip extra); an "
        "output that cannot be written; an episode id not found; a demo run that lost track "
        "of its episodes. No output is left half-written",
    ),
    (
        EXIT_USAGE,
        "usage",
        "bad arguments or settings",
        "argparse's own errors (an unknown option or choice, a missing --from), an unknown "
        "status or time, a bad AGENTTRACE_* value, an output that exists without --force, "
        "a --from that names trajectories instead of spans",
    ),
    (
        EXIT_PARTIAL,
        "partial",
        "written, but some records or episodes were bad and left out",
        "written, but some records or episodes were bad and left out, each named on stderr: "
        "lines or values that "
        "could not be decoded, episodes the output format cannot hold, score rows that are "
        "not scores, spans or episodes the demo's pipeline lost. Lines that cannot be read "
        "at all (not JSON, torn by a crash) are skipped and named but do not by themselves "
        "make a run partial",
    ),
    (EXIT_INTERRUPTED, "interrupted", "Ctrl-C", "Ctrl-C; an interrupted export leaves no output"),
)

#: Top-level module -> the extra of agenttrace that installs it.
PACKAGE_EXTRAS = {
    "pyarrow": "parquet",
    "minari": "minari",
    "h5py": "minari",
    "PIL": "minari",
    "zstandard": "zstd",
    "gymnasium": "gym",
    "dm_env": "dm-env",
    "fsspec": "blobs",
    "ray": "ray",
}


def exit_epilog() -> str:
    """The exit-code table as ``agenttrace --help`` shows it."""
    lines = ["Exit status (every command; docs/cli.md says when each applies):"]
    for code, name, short, _ in EXIT_CODES:
        lines.append(f"  {code:<4}{name}: {short}")
    return "\n".join(lines)


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 episode``, ``2 episodes``, ``1,024 spans``: a number with its noun agreeing."""
    word = noun if number == 1 else (plural or noun + "s")
    return f"{number:,} {word}"


def _missing_module(exc: BaseException) -> str | None:
    """The module whose import failed, from ``exc`` or what it was raised from."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = getattr(current, "name", None)
        if isinstance(current, ImportError) and name:
            return str(name)
        current = current.__cause__ or current.__context__
    match = re.search(r"No module named '([\w.]+)'", str(exc))
    return match.group(1) if match else None


def _requirements(extra: str) -> list[str]:
    """What ``extra`` of this distribution installs (from its metadata)."""
    try:
        requires = distribution(DISTRIBUTION).requires or []
    except PackageNotFoundError:  # pragma: no cover - run from a tree that is not installed
        return []
    wanted = re.compile(r"""extra\s*==\s*["']%s["']""" % re.escape(extra))
    return [line.split(";", 1)[0].strip() for line in requires if wanted.search(line)]


def missing_package(exc: BaseException) -> str | None:
    """One line naming the missing optional package and the pip extra that installs it, or
    None when ``exc`` is not about a missing package agenttrace knows."""
    module = _missing_module(exc)
    if module is None:
        return None
    top = module.split(".")[0]
    extra = PACKAGE_EXTRAS.get(top)
    if extra is None:
        return f"missing package {top} ({exc})"
    packages = " ".join(f"'{requirement}'" for requirement in _requirements(extra)) or top
    # agenttrace is not on the package index yet: its extras install from a clone.
    return (
        f"missing optional package {top} (the {extra!r} extra): pip install {packages}, or "
        f"from a clone of the repository: pip install -e '.[{extra}]'"
    )


def error_text(exc: BaseException) -> str:
    """What to say about ``exc``: the missing package and its extra, or the message."""
    return missing_package(exc) or str(exc) or type(exc).__name__


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit 2): what is wrong and
    where the help is, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)

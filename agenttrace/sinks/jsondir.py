"""One pretty-printed JSON file per episode, for episodes too large to scan in a JSONL file.

Files are named ``<safe_filename(episode_id)>.json``: any id, even ``../../etc/passwd``, stays
a single name inside the folder, and different ids get different names. Each file is written
to a temporary name, synced and renamed into place, so a reader sees either nothing or the
whole episode. Writing an episode id again replaces its file.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

from agenttrace.sinks.files import resolve_inside
from agenttrace.trajectory.model import Trajectory

_O_BINARY = getattr(os, "O_BINARY", 0)


class JsonDirSink:
    """Writes each trajectory to ``folder/<safe episode id>.json`` (indented JSON)."""

    def __init__(self, folder: str | os.PathLike, *, indent: int | None = 2) -> None:
        self.folder = Path(folder)
        self.indent = indent
        self.folder.mkdir(parents=True, exist_ok=True)
        self._paths: list[Path] = []
        self._closed = False

    @property
    def paths(self) -> list[Path]:
        """The files this sink wrote, in write order (a rewritten episode appears once)."""
        return list(self._paths)

    def path_for(self, episode_id: str) -> Path:
        """Where the episode ``episode_id`` is stored."""
        return resolve_inside(self.folder, str(episode_id), suffix=".json")

    def write(self, trajectory: Trajectory) -> None:
        """Write the episode's file atomically (temporary file, fsync, rename)."""
        if self._closed:
            raise RuntimeError(f"JsonDirSink({str(self.folder)!r}) is closed; cannot write")
        target = self.path_for(trajectory.episode_id)
        text = json.dumps(
            trajectory.to_dict(), ensure_ascii=False, allow_nan=False, indent=self.indent
        )
        # Created like any new file (mode from the umask), unlike tempfile's private 0600.
        temporary = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666)
        try:
            with open(fd, "wb") as handle:
                # backslashreplace: a lone surrogate becomes its JSON escape (see utf8_safe).
                handle.write(text.encode("utf-8", "backslashreplace") + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        if target not in self._paths:
            self._paths.append(target)

    def flush(self) -> None:
        """Nothing buffered: every write is already a complete, synced file."""

    def close(self) -> None:
        """Later writes raise."""
        self._closed = True

    def __repr__(self) -> str:
        return f"JsonDirSink({str(self.folder)!r})"

"""The rollout rows the trainer reads: one SQLite row per step, written by ``record_step``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    step_id INTEGER NOT NULL,
    messages TEXT NOT NULL,
    response TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    step_reward REAL NOT NULL,
    terminated INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    is_trainable INTEGER NOT NULL,
    PRIMARY KEY (session_id, step_id)
);
"""


class RolloutStore:
    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(path)
        with self._db:
            self._db.executescript(SCHEMA)
        self._sessions = 0

    def open_session(self, task_id: str) -> str:
        self._sessions += 1
        session = f"{task_id}/{self._sessions}"
        with self._db:
            self._db.execute("INSERT INTO sessions VALUES (?, ?)", (session, task_id))
        return session

    def record_step(
        self,
        session: str,
        step_id: int,
        messages: list[dict[str, Any]],
        response: str,
        finish_reason: str,
        step_reward: float,
        terminated: bool,
        truncated: bool,
        is_trainable: bool,
    ) -> None:
        row = (
            session,
            step_id,
            json.dumps(messages),
            response,
            finish_reason,
            float(step_reward),
            int(terminated),
            int(truncated),
            int(is_trainable),
        )
        with self._db:
            self._db.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def close(self) -> None:
        self._db.close()

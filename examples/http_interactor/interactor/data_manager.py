"""DataManager: the rollout rows the trainer reads, in SQLite (one row per step).

``record_step(session, step_id, messages, response, step_reward, env_state, terminated,
truncated, is_trainable)`` is the Safactory-style call; sessions also keep the task, the env
actor and the policy (weights) version that played them. Called from worker threads, so one
connection is shared under a lock.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    actor_id TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    step_id INTEGER NOT NULL,
    messages TEXT NOT NULL,
    response TEXT NOT NULL,
    step_reward REAL NOT NULL,
    env_state TEXT,
    terminated INTEGER NOT NULL,
    truncated INTEGER NOT NULL,
    is_trainable INTEGER NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (session_id, step_id)
);
"""


class DataManager:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        with self._lock, self._db:
            self._db.executescript(SCHEMA)

    def open_session(self, session: str, task_id: str, actor_id: str, policy_version: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                (session, task_id, actor_id, policy_version, time.time()),
            )

    def record_step(
        self,
        session: str,
        step_id: int,
        messages: list[dict[str, Any]],
        response: str,
        step_reward: float,
        env_state: dict[str, Any] | None,
        terminated: bool,
        truncated: bool,
        is_trainable: bool,
    ) -> None:
        row = (
            session,
            step_id,
            json.dumps(messages),
            response,
            float(step_reward),
            None if env_state is None else json.dumps(env_state),
            int(terminated),
            int(truncated),
            int(is_trainable),
            time.time(),
        )
        with self._lock, self._db:
            self._db.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def close(self) -> None:
        with self._lock:
            self._db.close()

"""What an environment is called: its registered id, a name to show, and its spec.

Episodes record them (``rl.env.name``, ``rl.env.spec``) so that a process that never saw the
env object (the writer helper, ``agenttrace export``) can name it and rebuild its spaces
(docs/minari.md).
"""

from __future__ import annotations

from typing import Any


def env_id(env: Any) -> str | None:
    """A gymnasium env's registered id (``CartPole-v1``), or None when it has none."""
    spec = getattr(getattr(env, "unwrapped", env), "spec", None) or getattr(env, "spec", None)
    name = getattr(spec, "id", None)
    return name if isinstance(name, str) else None


def env_display_name(env: Any) -> str:
    """The env's registered id, else the class name of the env it wraps."""
    spec = getattr(env, "spec", None)
    name = getattr(spec, "id", None)
    if isinstance(name, str):
        return name
    return type(getattr(env, "unwrapped", env)).__name__


def env_spec_json(env: Any) -> str | None:
    """A gymnasium env's spec as ``EnvSpec.to_json()`` text (``rl.env.spec``), or None when
    it has none or it cannot be written (a callable entry point, kwargs JSON cannot hold)."""
    spec = getattr(env, "spec", None)
    to_json = getattr(spec, "to_json", None)
    if to_json is None:
        return None
    try:
        text = to_json()
    except Exception:  # (gymnasium refuses callables and non-JSON kwargs)
        return None
    return text if isinstance(text, str) else None

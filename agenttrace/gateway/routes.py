"""Which episode a call belongs to, and which model API it is, from its URL and headers.

The gateway serves the model APIs under ``/v1`` (``chat/completions``, ``completions``,
``responses``, ``messages``, ``models``), bare or behind a path prefix that names the episode:

* ``/e/<episode-id>/v1/...``: agenttrace's own (what ``agenttrace run`` gives its child);
* ``/rollout/<rollout>/attempt/<attempt>/v1/...``: Agent Lightning's, so its clients work
  unchanged (episode ``<rollout>-<attempt>``);
* ``/sessions/<session>/v1/...``: verl's agent gateway's (episode ``<session>``);
* any other template given with ``--prefix`` (``/runs/{run}/{episode}``).

Without one, the headers decide: ``X-Agenttrace-Episode`` (with ``X-Agenttrace-Task`` and
``X-Agenttrace-Group``), or a W3C ``traceparent`` from an instrumented caller, whose episode
and step the call then joins. A client that can set neither gets the continuity rule
(:meth:`agenttrace.gateway.recorder.EpisodeBook.continued`): a call whose messages continue an
open episode's last call and answer joins that episode; any other starts a new one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["API_PATHS", "DEFAULT_PREFIXES", "Route", "Router"]

#: The model API paths the gateway serves, and what each one is.
API_PATHS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
    "/v1/models": "models",
}
DEFAULT_PREFIXES = (
    "/e/{episode}",
    "/rollout/{rollout}/attempt/{attempt}",
    "/sessions/{session}",
)
EPISODE_HEADER = "X-Agenttrace-Episode"
TASK_HEADER = "X-Agenttrace-Task"
GROUP_HEADER = "X-Agenttrace-Group"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Route:
    """A call's API (``chat``, ``messages``, ...), the path to ask the upstream for, and the
    episode its URL names (None: the headers or the continuity rule decide)."""

    api: str
    upstream_path: str
    episode_id: str | None = None


class Router:
    """Paths to routes, through the path prefix templates."""

    def __init__(self, prefixes: Iterable[str] = DEFAULT_PREFIXES) -> None:
        self.prefixes = tuple(prefixes)
        self._patterns = [_compile(prefix) for prefix in self.prefixes]

    def route(self, path: str) -> Route | None:
        """The route of ``path``; None when it is no model API path."""
        api = API_PATHS.get(path)
        if api is not None:
            return Route(api, path)
        for pattern in self._patterns:
            match = pattern.match(path)
            if match is None:
                continue
            rest = path[match.end() :]
            api = API_PATHS.get(rest)
            if api is not None:
                return Route(api, rest, "-".join(match.groups()))
        return None

    def episode_path(self, path: str) -> tuple[str, str] | None:
        """``(episode id, what follows)`` for a path under an episode prefix (its score and
        end endpoints), else None."""
        for pattern in self._patterns:
            match = pattern.match(path)
            if match is not None:
                return "-".join(match.groups()), path[match.end() :]
        return None


def episode_from_headers(headers: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """``(episode, task, group)`` the ``X-Agenttrace-*`` headers name (None for each absent)."""
    return (
        headers.get(EPISODE_HEADER) or None,
        headers.get(TASK_HEADER) or None,
        headers.get(GROUP_HEADER) or None,
    )


def _compile(template: str) -> re.Pattern[str]:
    if not template.startswith("/") or not _PLACEHOLDER.search(template):
        raise ValueError(
            f"path prefix {template!r} must start with / and name the episode with at least "
            "one {placeholder}, e.g. /runs/{run}/{episode}"
        )
    pattern, position = "", 0
    for match in _PLACEHOLDER.finditer(template):
        pattern += re.escape(template[position : match.start()]) + "([^/]+)"
        position = match.end()
    pattern += re.escape(template[position:])
    return re.compile(pattern)

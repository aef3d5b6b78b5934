"""Tempo reader: TraceQL search, then each trace, served like Tempo 2.0 and 2.6 answer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from backend_servers import BackendServer, tempo_route
from conftest import SERVICE, TOKEN

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.storage.tempo import TempoReader, episode_query


@pytest.fixture
def tempo():
    servers: list[BackendServer] = []

    def start(records, version: str) -> BackendServer:
        servers.append(BackendServer(tempo_route(records, version=version)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.mark.parametrize("version", ["2.0", "2.6"])
def test_search_and_fetch_rebuild_the_live_trajectories(cartpole_run, tempo, version) -> None:
    live, records = cartpole_run
    server = tempo(records, version)
    reader = TempoReader(
        server.url,
        service=SERVICE,
        start=datetime.now(timezone.utc) - timedelta(hours=1),
        token=TOKEN,
        limit=20,
    )
    got = at.assemble(reader.records())
    assert sorted(t.episode_id for t in got) == sorted(t.episode_id for t in live)
    by_id = {t.episode_id: t for t in live}
    for trajectory in got:
        assert trajectory == by_id[trajectory.episode_id]
    assert reader.traces_found == 3
    search = server.requests[0]
    assert search["path"] == "/api/search"
    assert search["query"]["q"] == [episode_query(SERVICE)]
    assert search["query"]["limit"] == ["20"]
    assert all(r["headers"]["authorization"] == f"Bearer {TOKEN}" for r in server.requests)


def test_default_query_uses_the_semantic_convention_names() -> None:
    query = episode_query("svc")
    assert f'name = "{sc.EPISODE}"' in query and 'resource.service.name = "svc"' in query
    assert episode_query() == '{ name = "episode" }'


def test_trace_ids_skip_the_search(cartpole_run, tempo) -> None:
    live, records = cartpole_run
    server = tempo(records, "2.6")
    got = at.assemble(TempoReader(server.url, trace_ids=[live[1].trace_id]).records())
    assert got == [live[1]]
    assert all(r["path"] != "/api/search" for r in server.requests)

"""A trajectory rebuilt from storage equals the live one, or says which fields it cannot trust."""

from __future__ import annotations

from backend_servers import BackendServer, jaeger_v1_route
from conftest import SERVICE

import agenttrace as at
from agenttrace import semconv as sc
from agenttrace.storage import JaegerReader
from agenttrace.trajectory.lossy import NOT_JSON
from agenttrace.trajectory.records import LOSSY_CONTEXT, LOSSY_TIMES, SpanRecord


def _replace_attribute(record: SpanRecord, key: str, value) -> SpanRecord:
    return record._replace(attributes={**record.attributes, key: value})


def test_live_and_whole_rebuilds_are_never_lossy(cartpole_run) -> None:
    live, records = cartpole_run
    assert all(t.lossy == {} for t in live)
    assert all(t.lossy == {} for t in at.assemble(records))


def test_content_cut_by_a_backend_is_flagged_where_it_lands(cartpole_run) -> None:
    """Text cut mid-JSON (Tempo's attribute limit) is kept as text and flagged, not trusted."""
    live, records = cartpole_run
    episode = live[0].episode_id
    last = live[0].steps[-1].index
    cuts = {
        (sc.ENV_STEP, 3, sc.ACTION): '{"$tuple": [1, 2',
        (sc.AGENT_ACT, 5, sc.OBSERVATION): '{"$ndarray": {"dtype": "<f4", "sha',
        (sc.ENV_STEP, last, sc.OBSERVATION): '{"$ndarray": {"dtype',  # what the episode ended on
        (sc.AGENT_ACT, 6, sc.ACTION): "[1,",  # env.step 6's action wins: no loss
    }
    damaged = []
    for record in records:
        for (name, index, key), text in cuts.items():
            attributes = record.attributes
            if (attributes.get(sc.EPISODE_ID), record.name) == (episode, name) and attributes.get(
                sc.TIMESTEP_INDEX
            ) == index:
                record = _replace_attribute(record, key, text)
        damaged.append(record)
    rebuilt = {t.episode_id: t for t in at.assemble(damaged)}
    assert rebuilt[episode].lossy == {
        "steps[3].action": NOT_JSON,
        "steps[5].observation": NOT_JSON,
        "final_observation": NOT_JSON,
    }
    assert rebuilt[episode].steps[3].action == '{"$tuple": [1, 2'  # kept, as text
    assert rebuilt[episode].steps[6] == live[0].steps[6]
    assert all(rebuilt[t.episode_id] == t for t in live[1:])


def test_record_losses_map_to_trajectory_fields(cartpole_run) -> None:
    live, records = cartpole_run
    episode = live[1].episode_id
    length = live[1].length
    marks = {
        ("env.step", 2): {sc.ACTION: "truncated to 2000 bytes by the export content policy"},
        ("env.step", length - 1): {sc.OBSERVATION: "blob sha256:… missing from /blobs"},
        ("agent.act", 0): {LOSSY_CONTEXT: "no resource", "some.other.key": "retyped"},
    }
    damaged = []
    for record in records:
        key = (record.name, record.attributes.get(sc.TIMESTEP_INDEX))
        if record.attributes.get(sc.EPISODE_ID) == episode and key in marks:
            record = record._replace(lossy=marks[key])
        elif record.name == sc.EPISODE and record.attributes[sc.EPISODE_ID] == episode:
            record = record._replace(lossy={sc.TASK_ID: "retyped by the backend"})
        damaged.append(record)
    rebuilt = {t.episode_id: t for t in at.assemble(damaged)}[episode]
    assert rebuilt.lossy == {
        "steps[2].action": "truncated to 2000 bytes by the export content policy",
        "final_observation": "blob sha256:… missing from /blobs",
        f"attributes.{sc.TASK_ID}": "retyped by the backend",
    }
    # what no trajectory field holds (context, keys the steps never read) is not a loss
    assert rebuilt.steps == live[1].steps


def test_jaeger_v1_rebuilds_say_their_times_are_microseconds(cartpole_run, tmp_path) -> None:
    live, records = cartpole_run
    server = BackendServer(jaeger_v1_route(records))
    try:
        reader = JaegerReader(server.url, api="v1", service=SERVICE)
        rebuilt = at.assemble(reader.records())
    finally:
        server.stop()
    assert [t.episode_id for t in rebuilt] == [t.episode_id for t in live]
    for trajectory in rebuilt:
        assert list(trajectory.lossy) == ["times"]
        assert "microsecond" in trajectory.lossy["times"]
    assert LOSSY_TIMES not in live[0].lossy

"""The rules of a conventions mapping (agenttrace/trajectory/conventions.py) one at a time, on
span records and tables written by hand: how a span is matched, how each field's value is
typed, what a mapped error becomes, how a mapping is read, and each mistake's full message."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agenttrace import semconv as sc
from agenttrace.trajectory.conventions import (
    PRESETS,
    Conventions,
    ConventionsError,
    SpanRule,
    conventions_from_table,
    conventions_from_value,
    read_conventions_file,
    translated,
)
from agenttrace.trajectory.records import SpanEvent, SpanRecord

ROLES = "episode, env.reset, timestep, agent.act, env.step, llm, tool, score"
FORMATS = "openinference.llm, openinference.tool, traceloop.tool, agentlightning.reward"
FIELDS = (
    "reward, done, terminated, truncated, discount, timestep_index, task_id, episode_id, "
    "observation, action, info, error"
)
PRESET_NAMES = "runner, genai, openinference, traceloop, agentlightning, openllmetry"
RULE_KEYS = "role, name, name_prefix, attribute, values, root_only, format"


def _record(
    name: str, attributes: dict[str, Any], *, parent: int = 5, end: int | None = 20, **more: Any
) -> SpanRecord:
    return SpanRecord(7, 11, parent, name, 10, end, attributes, **more)


def _raises(message: str) -> Any:
    return pytest.raises(ConventionsError, match="^" + re.escape(message) + "$")


def _mapped(field: str, value: Any, role: str = "env.step") -> dict[str, Any]:
    """The attributes of a span of ``role`` (already so named) whose ``theirs`` attribute maps
    to ``field``."""
    conventions = Conventions((SpanRule(role, name=role),), {field: ("theirs",)})
    (record,) = conventions.translate(_record(role, {"theirs": value}))
    return dict(record.attributes)


# --- matching ---------------------------------------------------------------------------------


def test_a_rule_without_values_matches_any_value_and_compares_values_as_text() -> None:
    any_value = SpanRule("llm", attribute="kind")
    assert any_value.matches("x", {"kind": 0}, False) and any_value.matches(
        "x", {"kind": ""}, False
    )
    assert not any_value.matches("x", {"kind": None}, False)
    numbered = SpanRule("llm", attribute="kind", values=(1, 2))  # type: ignore[arg-type]
    assert numbered.values == ("1", "2")
    assert numbered.matches("x", {"kind": 2}, False) and numbered.matches("x", {"kind": "1"}, False)
    assert not numbered.matches("x", {"kind": 3}, False)
    prefixed = SpanRule("tool", name="tool run", name_prefix="tool")
    assert prefixed.matches("tool run", {}, False) and not prefixed.matches("tool walk", {}, False)


def test_the_first_rule_that_matches_wins() -> None:
    first, second = SpanRule("llm", name_prefix="a"), SpanRule("tool", name="ab")
    conventions = Conventions((first, second))
    assert conventions.rule_for("ab", {}, False) is first
    assert Conventions((second, first)).rule_for("ab", {}, False) is second
    assert conventions.rule_for("b", {}, False) is None


def test_a_mapping_is_true_when_it_has_span_rules() -> None:
    assert Conventions((SpanRule("llm", name="a"),))
    assert not Conventions((), {"reward": ("r",)})


def test_a_root_is_a_span_without_a_parent_or_with_a_remote_one() -> None:
    conventions = Conventions((SpanRule("episode", name="run", root_only=True),))
    assert conventions.translate(_record("run", {}, parent=0))[0].name == sc.EPISODE
    remote = _record("run", {}, parent=3, parent_is_remote=True)
    assert conventions.translate(remote)[0].name == sc.EPISODE
    assert conventions.translate(_record("run", {}, parent=3))[0].name == "run"


# --- translating one span ---------------------------------------------------------------------


def test_a_renamed_span_keeps_its_old_name_and_an_episode_gets_a_derived_id() -> None:
    conventions = Conventions(
        (SpanRule("episode", name="run"), SpanRule("timestep", name=sc.TIMESTEP))
    )
    (episode,) = conventions.translate(_record("run", {}))
    assert episode.name == sc.EPISODE
    assert episode.attributes == {
        "agenttrace.span.name": "run",
        sc.EPISODE_ID: "00000000000000000000000000000007-000000000000000b",
    }
    (stated,) = conventions.translate(_record("run", {sc.EPISODE_ID: "mine"}))
    assert stated.attributes[sc.EPISODE_ID] == "mine"
    (same,) = conventions.translate(_record(sc.TIMESTEP, {}))
    assert same.attributes == {}  # (already its role's name: nothing to keep)
    (given,) = conventions.translate(_record("run", {"agenttrace.span.name": "before"}))
    assert given.attributes["agenttrace.span.name"] == "before"


def test_a_model_or_tool_calls_own_operation_stays() -> None:
    conventions = Conventions((SpanRule("llm", name="a"), SpanRule("tool", name="b")))
    (llm,) = conventions.translate(_record("a", {sc.GEN_AI_OPERATION_NAME: "text_completion"}))
    (tool,) = conventions.translate(_record("b", {sc.GEN_AI_OPERATION_NAME: "other"}))
    assert llm.attributes[sc.GEN_AI_OPERATION_NAME] == "text_completion"
    assert tool.attributes[sc.GEN_AI_OPERATION_NAME] == "other"


def test_a_formats_attributes_do_not_replace_the_spans_own() -> None:
    conventions = PRESETS["traceloop"]
    attributes = {
        "traceloop.span.kind": "tool",
        "traceloop.entity.name": "search",
        sc.GEN_AI_TOOL_NAME: "mine",
    }
    (tool,) = conventions.translate(_record("search.tool", attributes))
    assert tool.attributes[sc.GEN_AI_TOOL_NAME] == "mine"
    assert tool.attributes[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OPERATION_EXECUTE_TOOL
    assert tool.name == "search.tool"


def test_translated_records_pass_through_an_empty_mapping_and_split_scores() -> None:
    records = [_record("x", {}), _record("agentlightning.reward", {"reward": 1.0})]
    assert list(translated(records, Conventions())) == records
    out = list(translated(records, PRESETS["agentlightning"]))
    assert [r.name for r in out] == ["x", sc.SCORE]


# --- scores -----------------------------------------------------------------------------------


def test_each_score_of_an_annotation_span_is_a_score_record() -> None:
    attributes = {
        "agentlightning.reward.0.name": "task",
        "agentlightning.reward.0.value": 1.0,
        "agentlightning.reward.1.name": "style",
        "agentlightning.reward.1.value": 0.5,
        "agentlightning.reward.2.name": "speed",
        "agentlightning.reward.2.value": 0.25,
        sc.EPISODE_ID: "ep",
        sc.SCORE_STEP: 3,
        "other": "x",
    }
    event = SpanEvent("note", 12, {})
    span = _record("agentlightning.annotation", attributes, events=(event,))
    first, second, third = PRESETS["agentlightning"].translate(span)
    assert [r.name for r in (first, second, third)] == [sc.SCORE] * 3
    assert dict(first.attributes) == {
        sc.SCORE_NAME: "reward",
        sc.SCORE_VALUE: 1.0,
        sc.SCORE_COMMENT: "task",
        sc.EPISODE_ID: "ep",
        sc.SCORE_STEP: 3,
        "agenttrace.span.name": "agentlightning.annotation",
    }
    assert second.attributes[sc.SCORE_NAME] == "style"
    assert third.attributes[sc.SCORE_VALUE] == 0.25
    golden = 0x9E3779B97F4A7C15
    assert first.span_id == 11
    assert second.span_id == (11 ^ golden) & (2**64 - 1)
    assert third.span_id == (11 ^ (2 * golden)) & (2**64 - 1)
    assert first.events == second.events == ()
    (unstated,) = PRESETS["agentlightning"].translate(
        _record("agentlightning.reward", {"reward": 2.0, sc.SCORE_STEP: 9})
    )
    assert sc.EPISODE_ID not in unstated.attributes and unstated.attributes[sc.SCORE_STEP] == 9
    nothing = _record("agentlightning.reward", {"reward": "much"})
    assert PRESETS["agentlightning"].translate(nothing) == [nothing]


def test_a_second_scores_span_id_is_never_zero() -> None:
    golden = 0x9E3779B97F4A7C15
    span = _record(
        "agentlightning.annotation",
        {"agentlightning.reward.0.value": 1.0, "agentlightning.reward.1.value": 2.0},
    )._replace(span_id=golden)
    first, second = PRESETS["agentlightning"].translate(span)
    assert (first.span_id, second.span_id) == (golden, 1)
    assert second.attributes[sc.SCORE_NAME] == "reward.1"


# --- fields -----------------------------------------------------------------------------------


def test_the_first_of_a_fields_keys_that_the_span_has_wins() -> None:
    conventions = Conventions((SpanRule("env.step", name="s"),), {"reward": ("a", "b", "c")})
    (record,) = conventions.translate(_record("s", {"b": 2.0, "c": 3.0}))
    assert record.attributes == {sc.REWARD: 2.0, "c": 3.0, "agenttrace.span.name": "s"}


def test_a_mapped_value_that_is_none_stays_where_it_was() -> None:
    assert _mapped("reward", None) == {"theirs": None}
    assert _mapped("done", "maybe") == {"theirs": "maybe"}


def test_keys_of_agenttrace_and_genai_are_read_but_never_dropped() -> None:
    conventions = Conventions(
        (SpanRule("env.step", name=sc.ENV_STEP),),
        {"task_id": ("gen_ai.conversation.id",), "reward": ("rl.score",)},
    )
    attributes = {"gen_ai.conversation.id": "c", "rl.score": 1}
    (record,) = conventions.translate(_record(sc.ENV_STEP, attributes))
    assert record.attributes == {**attributes, sc.TASK_ID: "c", sc.REWARD: 1.0}


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (True, 1.0),
        (False, 0.0),
        (2, 2.0),
        (0.5, 0.5),
        ("1e3", 1000.0),
        (" 2 ", 2.0),
        ("lots", None),
        ("nan", None),
        ("-inf", None),
        (float("inf"), None),
        (10**400, None),
        ([1.0], None),
        (None, None),
    ],
)
def test_a_reward_or_discount_is_a_finite_number(value, number) -> None:
    for field, key in (("reward", sc.REWARD), ("discount", sc.DISCOUNT)):
        attributes = _mapped(field, value)
        if number is None:
            assert attributes == {"theirs": value}
        else:
            assert attributes == {key: number} and type(attributes[key]) is float


@pytest.mark.parametrize(
    ("value", "flag"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        (1.0, True),
        (0.0, False),
        ("TRUE", True),
        ("False", False),
        (2, None),
        (0.5, None),
        ("yes", None),
        ("", None),
        ([True], None),
    ],
)
def test_a_flag_is_a_bool_a_zero_or_one_or_its_word(value, flag) -> None:
    for field, key in (
        ("done", sc.DONE),
        ("terminated", sc.TERMINATED),
        ("truncated", sc.TRUNCATED),
    ):
        attributes = _mapped(field, value)
        if flag is None:
            assert attributes == {"theirs": value}
        else:
            assert attributes == {key: flag} and type(attributes[key]) is bool


@pytest.mark.parametrize(
    ("value", "index"),
    [
        (0, 0),
        (3, 3),
        (-1, None),
        (0.0, 0),
        ("0", 0),
        (True, None),
        (3.0, 3),
        (3.5, None),
        (-2.0, None),
        ("4", 4),
        ("4.0", 4),
        ("-4", None),
        ("x", None),
        ("inf", None),
        ([3], None),
    ],
)
def test_a_timestep_index_is_a_whole_number_from_zero(value, index) -> None:
    attributes = _mapped("timestep_index", value, "timestep")
    if index is None:
        assert attributes == {"theirs": value}
    else:
        assert attributes == {sc.TIMESTEP_INDEX: index}
        assert type(attributes[sc.TIMESTEP_INDEX]) is int


def test_each_field_is_mapped_past_one_not_found_or_already_given() -> None:
    conventions = Conventions(
        (SpanRule("env.step", name="env.step"),),
        {"reward": ("r",), "terminated": ("t",)},
    )
    (record,) = conventions.translate(_record("env.step", {"t": True}))
    assert dict(record.attributes) == {sc.TERMINATED: True}
    given = {sc.REWARD: 1.0, "r": 2.0, "t": True}
    (record,) = conventions.translate(_record("env.step", given))
    assert dict(record.attributes) == {sc.REWARD: 1.0, "r": 2.0, sc.TERMINATED: True}
    after_error = Conventions(
        (SpanRule("env.step", name="env.step"),),
        {"error": ("e",), "terminated": ("t",)},
    )
    (record,) = after_error.translate(_record("env.step", {"e": "boom", "t": True}))
    assert record.attributes.get(sc.TERMINATED) is True and "e" not in record.attributes
    assert record.status_code == "ERROR"


def test_ids_and_content_that_are_no_text_become_json_text() -> None:
    assert _mapped("task_id", "t") == {sc.TASK_ID: "t"}
    assert _mapped("task_id", 5) == {sc.TASK_ID: "5"}
    assert _mapped("episode_id", ("a", "é")) == {sc.EPISODE_EXTERNAL_ID: '["a", "é"]'}
    assert _mapped("observation", "[1]") == {sc.OBSERVATION: "[1]"}
    assert _mapped("action", (1, 2)) == {sc.ACTION: "[1, 2]"}
    assert _mapped("info", 2.5) == {sc.INFO: "2.5"}
    assert _mapped("task_id", {1, 2}) == {sc.TASK_ID: '"{1, 2}"'}  # (no JSON: its text)
    loop: list[Any] = []
    loop.append(loop)
    assert _mapped("info", loop) == {sc.INFO: "[[...]]"}  # (JSON cannot hold it: str())


def test_an_attribute_field_is_the_episodes_and_only_the_episodes() -> None:
    assert _mapped("attributes.level", ("a", "b"), "episode")["level"] == ["a", "b"]
    assert "theirs" not in _mapped("attributes.level", "hard", "episode")
    assert _mapped("attributes.level", "hard", "env.step") == {"theirs": "hard"}
    same = Conventions((SpanRule("episode", name="x"),), {"attributes.level": ("level",)})
    (record,) = same.translate(_record("x", {"level": "hard"}))
    assert record.attributes["level"] == "hard"
    kept = Conventions((SpanRule("episode", name="x"),), {"attributes.level": ("theirs",)})
    (record,) = kept.translate(_record("x", {"theirs": "new", "level": "old"}))
    assert record.attributes["level"] == "old" and "theirs" not in record.attributes


# --- errors -----------------------------------------------------------------------------------


def _failed(error: Any, role: str = "episode", **more: Any) -> SpanRecord:
    conventions = Conventions((SpanRule(role, name="x"),), {"error": ("err",)})
    (record,) = conventions.translate(_record("x", {"err": error}, **more))
    return record


def test_an_error_flag_fails_the_span_without_a_message() -> None:
    record = _failed(True)
    assert (record.status_code, record.status_message, record.events) == ("ERROR", None, ())
    assert "err" not in record.attributes


@pytest.mark.parametrize("value", ["", False, None, 0])
def test_an_empty_error_is_none(value) -> None:
    record = _failed(value)
    assert record.status_code == "UNSET" and record.attributes["err"] == value


def test_an_error_text_fails_the_span_and_an_episode_gets_its_exception_event() -> None:
    record = _failed(json.dumps({"type": "pkg.Boom", "message": "it broke"}))
    assert (record.status_code, record.status_message) == ("ERROR", "it broke")
    assert record.events == (
        SpanEvent(
            sc.EXCEPTION_EVENT,
            20,
            {sc.EXCEPTION_MESSAGE: "it broke", sc.EXCEPTION_TYPE: "pkg.Boom"},
        ),
    )
    open_span = _failed("plain", end=None)
    assert open_span.events == (SpanEvent(sc.EXCEPTION_EVENT, 10, {sc.EXCEPTION_MESSAGE: "plain"}),)
    step = _failed("plain", role="env.step")
    assert (step.status_code, step.status_message, step.events) == ("ERROR", "plain", ())
    earlier = SpanEvent("note", 11, {})
    raised = SpanEvent(sc.EXCEPTION_EVENT, 12, {sc.EXCEPTION_MESSAGE: "own"})
    assert _failed("plain", events=(earlier,)).events[0] == earlier
    assert len(_failed("plain", events=(earlier,)).events) == 2
    assert _failed("plain", events=(raised,)).events == (raised,)
    assert _failed("plain", status_code="ERROR").status_message is None


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        ('{"type": "T", "message": "m"}', "T", "m"),
        ('{"type": 3, "message": "m"}', None, "m"),
        ('{"message": "m"}', None, "m"),
        ('{"type": "T", "message": 5}', None, '{"type": "T", "message": 5}'),
        ('{"type": "T"', None, '{"type": "T"'),
        ("[" * 100_000, None, "[" * 100_000),
        ('["m"]', None, '["m"]'),
    ],
)
def test_an_error_text_is_its_type_and_message_as_json_else_itself(error, kind, message) -> None:
    (event,) = _failed(error).events
    assert event.attributes.get(sc.EXCEPTION_TYPE) == kind
    assert event.attributes[sc.EXCEPTION_MESSAGE] == message


def test_an_error_that_is_no_text_is_its_json_text() -> None:
    assert _failed(("a", "é")).status_message == '["a", "é"]'
    assert _failed(5).status_message == "5"


# --- reading a mapping ------------------------------------------------------------------------


def test_a_mapping_setting_names_presets_and_files(tmp_path) -> None:
    assert conventions_from_value(None) == Conventions()
    assert conventions_from_value(" runner ,, genai ").sources == ("runner", "genai")
    assert conventions_from_value(["genai ", "", "runner"]).sources == ("genai", "runner")
    for name in ("M.TOML", "m.Json"):
        path = tmp_path / name
        path.write_text('{"spans": [{"role": "llm", "name": "a"}]}' if "J" in name else "")
        assert conventions_from_value(str(path)).sources == (str(path),)
    folder = tmp_path / "plain"
    folder.write_text("{}")
    assert conventions_from_value(str(folder)).sources == (str(folder),)  # (a path: a file)
    with pytest.raises(ConventionsError, match=re.escape("b\\c")):
        conventions_from_value("b\\c")  # (a Windows path: a file, unreadable here)
    with _raises(
        f"conventions: 'runnr' is neither a preset ({PRESET_NAMES}) nor a .toml or .json file"
    ):
        conventions_from_value("runnr")


def test_a_files_mistakes_name_the_file(tmp_path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"presets": 3}')
    with _raises(f"conventions file {path}: presets: expected a list of preset names"):
        read_conventions_file(path)
    path.write_text("{")
    with pytest.raises(
        ConventionsError, match="^" + re.escape(f"conventions file {path}: not valid JSON: ")
    ):
        read_conventions_file(path)
    toml = tmp_path / "m.TOML"
    toml.write_text("x = [")
    with pytest.raises(
        ConventionsError, match="^" + re.escape(f"conventions file {toml}: not valid TOML: ")
    ):
        read_conventions_file(toml)
    missing = tmp_path / "none.toml"
    with pytest.raises(
        ConventionsError, match="^" + re.escape(f"conventions file {missing}: cannot be read: ")
    ):
        read_conventions_file(missing)


def test_a_table_under_conventions_or_at_the_top() -> None:
    rule = {"role": "llm", "name": "a"}
    nested = conventions_from_table({"conventions": {"spans": [rule]}}, source="s")
    top = conventions_from_table({"spans": [rule]}, source="s")
    assert nested == top == Conventions((SpanRule("llm", name="a"),), {}, ("s",))
    assert conventions_from_table({}).sources == ("table",)
    both = conventions_from_table(
        {"presets": "genai", "fields": {"episode_id": "mine", "reward": ["r", "s"]}}
    )
    assert both.sources == ("table", "genai")
    assert both.fields["episode_id"] == ("mine", sc.GEN_AI_CONVERSATION_ID)
    assert both.fields["reward"] == ("r", "s")
    assert both.spans == PRESETS["genai"].spans
    rules = conventions_from_table(
        {"spans": [{"role": "tool", "attribute": "k", "values": "v", "root_only": True}]}
    )
    assert rules.spans == (SpanRule("tool", attribute="k", values=("v",), root_only=True),)
    listed = conventions_from_table({"spans": [{"role": "tool", "name": "n", "values": ["a", 2]}]})
    assert listed.spans[0].values == ("a", "2")
    formatted = conventions_from_table(
        {"spans": [{"role": "tool", "name_prefix": "t", "format": "traceloop.tool"}]}
    )
    assert formatted.spans == (SpanRule("tool", name_prefix="t", format="traceloop.tool"),)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ([], "expected a table with presets, spans and fields"),
        ({"conventions": []}, "unknown key(s) 'conventions'; use presets, spans, fields"),
        ({"b": 1, "a": 2}, "unknown key(s) 'a', 'b'; use presets, spans, fields"),
        ({"presets": [1]}, "presets: expected a list of preset names"),
        ({"presets": ["runr"]}, f"presets: unknown preset 'runr'; use {PRESET_NAMES}"),
        ({"spans": "x"}, "spans: expected a list of tables (role, name, ...)"),
        ({"spans": ["x"]}, "spans[0]: expected a table (role, name, ...)"),
        (
            {"spans": [{"role": "llm", "name": "a"}, {"z": 1, "y": 2}]},
            f"spans[1]: unknown key(s) 'y', 'z'; use {RULE_KEYS}",
        ),
        ({"spans": [{"role": "llm", "values": 3}]}, "spans[0]: values must be a list"),
        ({"spans": [{"role": "llm", "name": 3}]}, "spans[0]: name must be text"),
        ({"spans": [{"role": "llm", "name_prefix": 3}]}, "spans[0]: name_prefix must be text"),
        ({"spans": [{"role": "llm", "attribute": 3}]}, "spans[0]: attribute must be text"),
        ({"spans": [{"role": "llm", "format": 3}]}, "spans[0]: format must be text"),
        ({"spans": [{"role": 3}]}, "spans[0]: role must be text"),
        (
            {"spans": [{"role": "llm", "name": "a", "root_only": 1}]},
            "spans[0]: root_only must be true or false",
        ),
        ({"spans": [{"name": "a"}]}, f"spans[0]: span rule: unknown role ''; use one of {ROLES}"),
        (
            {"spans": [{"role": "llm"}]},
            "spans[0]: span rule for role llm: give name, name_prefix or attribute",
        ),
        ({"fields": []}, "fields: expected a table of field = attribute name(s)"),
        ({"fields": {"reward": []}}, "field reward: give the attribute name(s) that hold it"),
        (
            {"fields": {"reward": [""]}},
            "fields: reward must be an attribute name or a list of them",
        ),
        (
            {"fields": {"reward": ["a", 2]}},
            "fields: reward must be an attribute name or a list of them",
        ),
        (
            {"fields": {"rewards": "r"}},
            f"field 'rewards' is not one agenttrace reads; use one of {FIELDS} or attributes.NAME",
        ),
    ],
)
def test_each_mistake_in_a_table_has_its_message(table, message) -> None:
    with _raises(message):
        conventions_from_table(table)


def test_a_rules_and_a_mappings_own_mistakes() -> None:
    with _raises(f"span rule: unknown role 'agent'; use one of {ROLES}"):
        SpanRule("agent", name="x")
    with _raises("span rule for role tool: give name, name_prefix or attribute"):
        SpanRule("tool")
    with _raises(f"span rule for role tool: unknown format 'x'; use one of {FORMATS}"):
        SpanRule("tool", name="x", format="x")
    with _raises("span rule: format openinference.tool reads role tool, not llm"):
        SpanRule("llm", name="x", format="openinference.tool")
    with _raises("field reward: give the attribute name(s) that hold it"):
        Conventions((), {"reward": ()})
    with _raises("field reward: give the attribute name(s) that hold it"):
        Conventions((), {"reward": (3,)})  # type: ignore[dict-item]
    for name in ("attributes.", "attributes.rl.x", "attribute.x"):
        with pytest.raises(ConventionsError, match="is not one agenttrace reads"):
            Conventions((), {name: ("a",)})
    assert Conventions((), {"attributes.rlx": ("a",)}).fields == {"attributes.rlx": ("a",)}

"""GenAI call spans: a model call (``chat {model}``) and a tool call (``execute_tool {name}``).

Both follow the OpenTelemetry GenAI conventions, so the assembler reads them like any other
instrumentation's. Inside a step span they belong to that step. Outside any, in an episode
without timesteps, they make the agent's turns (docs/tracing-api.md, "Agent turns"): a model
call opens a turn or joins the open one, a tool call consumes the turn's reply and closes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.trace import SpanKind

from agenttrace import pipeline
from agenttrace import semconv as sc
from agenttrace._logging import internal_error as _internal_error
from agenttrace._logging import warn_once as _warn_once
from agenttrace.instrument.arguments import CallArguments
from agenttrace.instrument.episode_state import TURN_CALL_PRIORITY, _EpisodeState, _Frame
from agenttrace.instrument.extractors import _UNSET
from agenttrace.instrument.field_values import count_value, finish_texts, text_value
from agenttrace.instrument.llm_requests import read_request, request_parameters
from agenttrace.instrument.llm_results import read_result
from agenttrace.instrument.scope import _Scope
from agenttrace.trajectory.call_placement import final_answer_request


def _turns_of(frame: _Frame | None) -> _EpisodeState | None:
    """The episode whose agent turns a call belongs to: the frame's, when the call is made
    outside any step span in an episode without timesteps (docs/tracing-api.md); else None."""
    if frame is None or frame.index is not None or frame.episode is None:
        return None
    return None if frame.episode.has_timesteps else frame.episode


class LLMCallScope(_Scope):
    """A GenAI ``chat {model}`` span inside a step."""

    role = "llm"
    kind = SpanKind.CLIENT
    _notes_errors = True
    _step_index: int | None = None  # the step the call belongs to, when known at its start
    _turn = False  # the call is (part of) an agent turn of its own

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str | None = None,
        operation: str = sc.GEN_AI_OPERATION_CHAT,
        attributes: dict[str, Any] | None = None,
        extractor: Callable[[Any], Any] | None = None,
        final_on: str | Iterable[str] | None = None,
        final_reward: float | None = None,
        final_terminated: bool | None = None,
        final_truncated: bool | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        # Reads the call's return value into what read_result understands (a target's
        # ``extractor=pkg.mod:func``); None: the value as it is.
        self._extractor = extractor
        # What a call whose finish reason is one of final_on means for its step: the
        # episode's last turn, with this reward and these flags (an llm target's
        # ``[final_on=length, reward=0, terminated=true]``).
        if isinstance(final_on, str):
            final_on = [final_on]
        self._final_on = frozenset(str(reason) for reason in final_on or ())
        self._final = (final_reward, final_terminated, final_truncated)
        self._model = model
        self._operation = operation
        self._attributes[sc.GEN_AI_OPERATION_NAME] = operation
        if model:
            self._attributes[sc.GEN_AI_REQUEST_MODEL] = model
        if provider:
            self._attributes[sc.GEN_AI_PROVIDER_NAME] = provider

    def _span_name(self) -> str:
        return sc.llm_span_name(self._model, self._operation)

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        if frame is not None and frame.index is not None:
            attributes[sc.TIMESTEP_INDEX] = frame.index
        elif (episode := _turns_of(frame)) is not None:
            # An agent turn: a step of its own unless an env.step consumes it.
            attributes[sc.TIMESTEP_INDEX] = episode.turn_index(self.role)
            attributes[sc.TIMESTEP_TURN] = True
            self._turn = True
        self._step_index = attributes.get(sc.TIMESTEP_INDEX)
        return frame

    def record(
        self,
        *,
        input_messages: Any = _UNSET,
        output_messages: Any = _UNSET,
        response_model: str | None = None,
        finish_reasons: list[str] | tuple[str, ...] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        response_id: str | None = None,
        tool_definitions: Any = _UNSET,
        prompt_token_ids: list[int] | None = None,
        completion_token_ids: list[int] | None = None,
        completion_logprobs: list[float] | None = None,
    ) -> None:
        """Record the request and response of the call (content follows the content policy;
        token ids and logprobs only with the ``tokens`` setting)."""
        span = self._span
        if span is None:
            return
        try:
            try:
                self._record_tokens(prompt_token_ids, completion_token_ids, completion_logprobs)
            except Exception:  # (its own fields only)
                _internal_error("recording the token ids of an LLM call")
            attrs: dict[str, Any] = self._encoded(
                (
                    (sc.GEN_AI_INPUT_MESSAGES, input_messages),
                    (sc.GEN_AI_OUTPUT_MESSAGES, output_messages),
                    (sc.GEN_AI_TOOL_DEFINITIONS, tool_definitions),
                )
            )
            role = self.role
            for key, name, value in (
                (sc.GEN_AI_RESPONSE_MODEL, "response_model", response_model),
                (sc.GEN_AI_RESPONSE_ID, "response_id", response_id),
            ):
                if value is not None:
                    text = value if type(value) is str else text_value(value, role, name)
                    if text:
                        attrs[key] = text
            for key, name, value in (
                (sc.GEN_AI_USAGE_INPUT_TOKENS, "input_tokens", input_tokens),
                (sc.GEN_AI_USAGE_OUTPUT_TOKENS, "output_tokens", output_tokens),
            ):
                if value is not None:
                    count = value if type(value) is int else count_value(value, role, name)
                    if count is not None:
                        attrs[key] = count
            reasons = None if finish_reasons is None else finish_texts(finish_reasons, role)
            if reasons is not None:
                attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
                if self._final_on.intersection(reasons):
                    self._record_final(attrs, list(reasons))
                elif self._turn and (
                    reasons == ("stop",) or final_answer_request(output_messages)[0]
                ):
                    self._record_final_answer()  # (an answer, or a final-answer tool call)
            if attrs:
                span.set_attributes(attrs)
        except Exception:
            _internal_error("recording an LLM call")

    def _record_tokens(
        self, prompt: list[int] | None, completion: list[int] | None, logprobs: list[float] | None
    ) -> None:
        runtime = self._runtime
        if runtime is None or not runtime.settings.tokens or not (prompt or completion):
            return
        limit = runtime.settings.tokens_max
        attrs: dict[str, Any] = {}
        for key, values in (
            (sc.LLM_PROMPT_TOKEN_IDS, prompt),
            (sc.LLM_COMPLETION_TOKEN_IDS, completion),
            (sc.LLM_COMPLETION_LOGPROBS, logprobs),
        ):
            if values:
                if len(values) > limit:
                    attrs[sc.LLM_TOKENS_CUT] = True
                    values = values[:limit]
                attrs[key] = values
        if attrs.get(sc.LLM_TOKENS_CUT):
            _warn_once(
                "tokens cut",
                "agenttrace: a model call's token list passed tokens_max (%d); it is cut and the "
                "call marked rl.llm.tokens_cut (AGENTTRACE_TOKENS_MAX raises the limit)",
                limit,
            )
        self._span.set_attributes(attrs)  # type: ignore[union-attr]

    def _record_final_answer(self) -> None:
        """A turn's answer that stopped by itself (not cut, no tool call): if nothing
        consumes it, the episode ended with it (the assembler's rule, docs/tracing-api.md)."""
        episode = self._frame.episode if self._frame else None
        if episode is not None and self._step_index is not None:
            episode.record_flags(self._step_index, TURN_CALL_PRIORITY, True, False)

    def _record_final(self, attrs: dict[str, Any], finish_reasons: list[str]) -> None:
        """The call ended its episode (its finish reason is one of ``final_on``): its step's
        reward and flags. Unless given, it is truncated when the answer was cut at its length
        limit and terminated otherwise."""
        reward, terminated, truncated = self._final
        cut = "length" in finish_reasons
        terminated = (not cut) if terminated is None else terminated
        truncated = cut if truncated is None else truncated
        attrs[sc.TERMINATED], attrs[sc.TRUNCATED] = terminated, truncated
        attrs[sc.DONE] = terminated or truncated
        if reward is not None:
            attrs[sc.REWARD] = float(reward)
        index = self._step_index
        episode = self._frame.episode if self._frame else None
        if episode is not None and index is not None:
            if reward is not None:
                episode.record_reward(index, TURN_CALL_PRIORITY, float(reward))
            episode.record_flags(index, TURN_CALL_PRIORITY, terminated, truncated)

    def record_response(self, response: Any) -> Any:
        """Record what the model returned; returns it unchanged. Reads OpenAI
        ``ChatCompletion``/``Response`` objects and their dicts, plain dicts
        (``content``/``text``/``message``, ``finish_reason``, ``usage``, ``tool_calls``) and
        text (:mod:`agenttrace.instrument.llm_results`); a target's ``extractor`` reads it
        first when given."""
        if self._span is None:
            return response
        try:
            value = self._extractor(response) if self._extractor is not None else response
            fields = read_result(value)
            if fields:
                self.record(**fields)
        except Exception:
            _internal_error("recording an LLM response")
        return response

    def _on_call(self, call: CallArguments) -> None:
        arguments = call.flat()
        model = arguments.get("model")
        if isinstance(model, str) and self._model is None:
            self._model = model
            self.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
            self._span.update_name(self._span_name())  # type: ignore[union-attr]
        # messages= (or prompt=), or a Responses API call's instructions= and input=
        self.record(**read_request(arguments))
        for key, value in request_parameters(arguments).items():
            self._span.set_attribute(key, value)  # type: ignore[union-attr]

    def _on_return(self, result: Any) -> None:
        self.record_response(result)


class ToolCallScope(_Scope):
    """A GenAI ``execute_tool {name}`` span: the tool's name, call id, arguments and result.

    Outside any step span, in an episode without timesteps, the tool consumes the open
    turn's reply: it belongs to that turn's step and closes it (the next model call starts
    the next turn); with no turn open it joins the last one.
    """

    role = "tool"
    kind = SpanKind.INTERNAL
    #: Parameters never taken for the tool's arguments: the framework's run context.
    CONTEXT_NAMES = frozenset({"ctx", "context", "run_context"})

    def __init__(
        self,
        name: str | None = None,
        *,
        attributes: dict[str, Any] | None = None,
        tracer_provider: Any = None,
        runtime: pipeline.AgentTrace | None = None,
    ) -> None:
        super().__init__(attributes, tracer_provider=tracer_provider, runtime=runtime)
        self._name = name
        self._in_turn: tuple[_EpisodeState, int] | None = None  # (episode, index)
        self._attributes[sc.GEN_AI_OPERATION_NAME] = sc.GEN_AI_OPERATION_EXECUTE_TOOL
        if name:
            self._attributes[sc.GEN_AI_TOOL_NAME] = name

    def _span_name(self) -> str:
        return f"{sc.GEN_AI_OPERATION_EXECUTE_TOOL} {self._name or 'tool'}"

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if self._name is None:  # a decorated tool is named after its function
            self._name = getattr(func, "__name__", None)
            if self._name:
                self._attributes[sc.GEN_AI_TOOL_NAME] = self._name
        return super().__call__(func)

    def _prepare(self, runtime, frame, attributes):  # type: ignore[override]
        if frame is not None and frame.index is not None:
            attributes[sc.TIMESTEP_INDEX] = frame.index
        elif (episode := _turns_of(frame)) is not None:
            index = episode.tool_index()
            if index is not None:
                attributes[sc.TIMESTEP_INDEX] = index
                self._in_turn = (episode, index)
                self._end_if_final_answer()
        return frame

    def _end_if_final_answer(self) -> None:
        """A final-answer tool (``final_answer``, ...) run in a turn does not consume the
        reply that called it: the episode ended with that answer."""
        if self._in_turn is not None and sc.is_final_answer_tool(self._name):
            episode, index = self._in_turn
            episode.record_flags(index, TURN_CALL_PRIORITY, True, False)

    def record(
        self,
        *,
        name: Any = _UNSET,
        call_id: Any = _UNSET,
        arguments: Any = _UNSET,
        result: Any = _UNSET,
    ) -> None:
        """Record the call (content follows the content policy)."""
        span = self._span
        if span is None:
            return
        try:
            attrs: dict[str, Any] = {}
            if isinstance(name, str) and name:
                attrs[sc.GEN_AI_TOOL_NAME] = name
                if name != self._name:
                    self._name = name
                    span.update_name(self._span_name())
                    self._end_if_final_answer()
            if call_id is not _UNSET and call_id is not None:
                text = text_value(call_id, self.role, "call_id", any_type=True)
                if text is not None:
                    attrs[sc.GEN_AI_TOOL_CALL_ID] = text
            attrs.update(
                self._encoded(
                    (
                        (sc.GEN_AI_TOOL_CALL_ARGUMENTS, arguments),
                        (sc.GEN_AI_TOOL_CALL_RESULT, result),
                    )
                )
            )
            self._write(attrs)
        except Exception:
            _internal_error("recording a tool call")

    def _on_call(self, call: CallArguments) -> None:
        # name= and arguments= only as a target maps them: a tool may have an argument
        # called name (greet(name)), and its arguments are the call's own otherwise.
        mapped = call.overrides or {}
        if "name" in mapped:
            self.record(name=mapped["name"])
        call_id = call.get("call_id")
        if call_id is _UNSET:
            call_id = call.get("tool_call_id")
        arguments = mapped.get("arguments", _UNSET)
        if arguments is _UNSET:  # the call's own arguments (not what the target mapped,
            # call_id=ctx.tool_call_id), but the run context
            own = CallArguments(call.parameters, call.args, call.kwargs)
            arguments = {
                key: value
                for key, value in own.flat().items()
                if key not in self.CONTEXT_NAMES and key not in ("self", "cls")
            }
        self.record(call_id=call_id, arguments=arguments)

    def _on_return(self, result: Any) -> None:
        self.record(result=result)

"""The contract: span names and attribute keys agenttrace emits and reads.

Nothing else in the package spells these strings. Spans written by any version of
agenttrace, by hand, or by another instrumentation are read back through these names, so a
change here is a change of the wire format (see docs/semantic-conventions.md).

RL attributes live in the ``rl.`` namespace (after the open ``rl.*`` proposal in the GenAI
semantic-conventions repository); LLM and tool calls use the OpenTelemetry GenAI names.
"""

from __future__ import annotations

#: Instrumentation scope (tracer name) of agenttrace's own spans; spans of other scopes are
#: "foreign": written by other instrumentations.
INSTRUMENTATION_SCOPE = "agenttrace"

# --- span names -------------------------------------------------------------------------
EPISODE = "episode"
ENV_RESET = "env.reset"
TIMESTEP = "timestep"
AGENT_ACT = "agent.act"
ENV_STEP = "env.step"
#: A runner's own record of a step (``data_manager.record_step(...)``, read by a target):
#: its fields win over every other span of that step.
STEP_RECORD = "step.record"

#: One call of a vector environment's ``step()``: the env steps of all its sub-environments
#: in one span (``rl.vector.*`` lists, one entry per sub-environment stepped), each read back
#: as the ``env.step`` of its own episode (trajectory.records.split_vector_step).
ENV_VECTOR_STEP = "env.vector_step"

#: A score given to an episode (or one of its steps) after the fact: a verifier, an LLM judge,
#: a human label (agenttrace.trajectory.scores). Carries rl.episode.id and rl.score.*.
SCORE = "score"

#: The span names agenttrace itself creates for RL structure, in nesting order.
RL_SPAN_NAMES = (
    EPISODE,
    ENV_RESET,
    TIMESTEP,
    AGENT_ACT,
    ENV_STEP,
    STEP_RECORD,
    ENV_VECTOR_STEP,
    SCORE,
)
#: Spans that carry ``rl.timestep.index`` and make a step, lowest precedence first: a field
#: one of them records wins over the same field from the roles before it.
STEP_ROLES = (TIMESTEP, AGENT_ACT, ENV_STEP, STEP_RECORD)

# --- rl.* attributes --------------------------------------------------------------------
# Episode identity, set at span start so samplers and searches can use them.
EPISODE_ID = "rl.episode.id"  # on the episode and stamped on every descendant span
#: The id the user's own code gives the episode, known only later (the runner's
#: ``env.get_episode_id()``, its returned record's ``episode_id``): the trajectory's
#: ``episode_id`` when present. rl.episode.id stays the key spans are grouped by.
EPISODE_EXTERNAL_ID = "rl.episode.external_id"
TASK_ID = "rl.task.id"
ENV_NAME = "rl.env.name"
#: The gymnasium environment's spec as ``EnvSpec.to_json()`` text (id, entry point, kwargs):
#: what rebuilds the env, and its spaces, in a process that never imported it (Minari).
ENV_SPEC = "rl.env.spec"
#: Which sub-environment of a vector environment the episode ran on (0, 1, ...).
ENV_INDEX = "rl.env.index"
#: The process that stepped that sub-environment (its pid: an async vector env's worker).
ENV_WORKER = "rl.env.worker"
# On an env.vector_step span: lists with one entry per sub-environment it stepped, in the
# same order. Content entries are JSON text, as rl.observation/rl.action/rl.info are.
VECTOR_EPISODE_IDS = "rl.vector.episode_ids"  # the episode each sub-environment was playing
VECTOR_ENV_INDICES = "rl.vector.env_indices"
VECTOR_STEP_INDICES = "rl.vector.step_indices"  # each step's rl.timestep.index
VECTOR_ACTIONS = "rl.vector.actions"
VECTOR_OBSERVATIONS = "rl.vector.observations"
VECTOR_INFOS = "rl.vector.infos"
VECTOR_REWARDS = "rl.vector.rewards"
VECTOR_TERMINATED = "rl.vector.terminated"
VECTOR_TRUNCATED = "rl.vector.truncated"
#: Every rl.vector.* list (stores without array attributes keep them as JSON text).
VECTOR_LISTS = (
    VECTOR_EPISODE_IDS,
    VECTOR_ENV_INDICES,
    VECTOR_STEP_INDICES,
    VECTOR_ACTIONS,
    VECTOR_OBSERVATIONS,
    VECTOR_INFOS,
    VECTOR_REWARDS,
    VECTOR_TERMINATED,
    VECTOR_TRUNCATED,
)
AGENT_NAME = "rl.agent.name"
POLICY_VERSION = "rl.policy.version"
EPISODE_SEED = "rl.episode.seed"
#: Several rollouts of one task (GRPO, best-of-n): the group's id, and how many episodes it
#: has when that is known.
GROUP_ID = "rl.group.id"
GROUP_SIZE = "rl.group.size"

# Episode outcome, set when the episode span ends.
EPISODE_STATUS = "rl.episode.status"
EPISODE_RETURN = "rl.episode.return"
EPISODE_LENGTH = "rl.episode.length"

# On a model call, when token capture is on (AGENTTRACE_TOKENS): what the server returned,
# never re-tokenised (docs/tokens.md).
LLM_PROMPT_TOKEN_IDS = "rl.llm.prompt_token_ids"
LLM_COMPLETION_TOKEN_IDS = "rl.llm.completion_token_ids"
LLM_COMPLETION_LOGPROBS = "rl.llm.completion_logprobs"
LLM_TOKENS_CUT = "rl.llm.tokens_cut"  # true: a list was cut at the tokens_max setting

# On a score span.
SCORE_NAME = "rl.score.name"  # "reward" (also added to a step's reward), or any other name
SCORE_VALUE = "rl.score.value"
SCORE_STEP = "rl.score.step"  # the step it is about (default: the last)
SCORE_COMMENT = "rl.score.comment"

# Step structure and outcome.
TIMESTEP_INDEX = "rl.timestep.index"
#: On a model call made outside any step span, in an episode without timesteps: the call is
#: (part of) the agent turn at its rl.timestep.index, a step even when no step span has it.
TIMESTEP_TURN = "rl.timestep.turn"
REWARD = "rl.reward"
DONE = "rl.done"
TERMINATED = "rl.terminated"
TRUNCATED = "rl.truncated"
DISCOUNT = "rl.discount"

# Content, JSON strings in agenttrace's value encoding (docs/trajectory-format.md).
# On env.reset and env.step rl.observation is the observation the env *returned*; on
# timestep and agent.act it is the observation the agent *acted on*.
OBSERVATION = "rl.observation"
ACTION = "rl.action"
INFO = "rl.info"

# --- episode statuses (values of rl.episode.status and Trajectory.status) ----------------
STATUS_COMPLETED = "completed"
STATUS_TRUNCATED = "truncated"
STATUS_ERRORED = "errored"
STATUS_CANCELLED = "cancelled"
STATUS_ABANDONED = "abandoned"
STATUS_ABORTED = "aborted"
#: Only ever set by the rebuild: the episode never ended, or steps are missing.
STATUS_INCOMPLETE = "incomplete"

EPISODE_STATUSES = (
    STATUS_COMPLETED,
    STATUS_TRUNCATED,
    STATUS_ERRORED,
    STATUS_CANCELLED,
    STATUS_ABANDONED,
    STATUS_ABORTED,
    STATUS_INCOMPLETE,
)

# --- OpenTelemetry GenAI conventions ------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # the pre-1.37 name of gen_ai.provider.name, still read
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
#: Request parameters agenttrace's llm_call records, by argument name.
GEN_AI_REQUEST_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
}
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
#: Tools that frameworks end a run with, their arguments being the answer: smolagents' and
#: many ReAct agents' ``final_answer``, pydantic-ai's output tool ``final_result`` (or
#: ``final_result_<Type>`` with several output types). A turn whose reply calls only one of
#: them is a final answer, like a reply that stops by itself (docs/tracing-api.md).
FINAL_ANSWER_TOOLS = ("final_answer", "final_result")
FINAL_ANSWER_TOOL_PREFIX = "final_result_"


def is_final_answer_tool(name: object) -> bool:
    """Whether a tool of this name delivers a run's final answer."""
    return isinstance(name, str) and (
        name in FINAL_ANSWER_TOOLS or name.startswith(FINAL_ANSWER_TOOL_PREFIX)
    )


GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"

GEN_AI_OPERATION_CHAT = "chat"
GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"
#: gen_ai.operation.name values that mean "a call to a model".
GEN_AI_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

# Older GenAI formats, read (never written) so spans of other instrumentations still fold
# into llm_calls (docs/llm-calls.md lists who emits which).
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"  # before gen_ai.usage.input_tokens
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"  # before ...output_tokens
# Semantic conventions up to 1.27: span events carrying the whole prompt or completion as JSON.
GEN_AI_CONTENT_PROMPT_EVENT = "gen_ai.content.prompt"
GEN_AI_CONTENT_COMPLETION_EVENT = "gen_ai.content.completion"
GEN_AI_PROMPT = "gen_ai.prompt"  # attribute of that event; OpenLLMetry: gen_ai.prompt.{i}.*
GEN_AI_COMPLETION = "gen_ai.completion"  # likewise; OpenLLMetry: gen_ai.completion.{i}.*
# Semantic conventions 1.28 to 1.36: one event per message (emitted as span events by some
# SDKs, with the event body as JSON in gen_ai.event.content), and one per choice.
GEN_AI_MESSAGE_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
GEN_AI_CHOICE_EVENT = "gen_ai.choice"
GEN_AI_EVENT_CONTENT = "gen_ai.event.content"
# Semantic conventions 1.37 and later: the per-call details event (a log record from
# opentelemetry-util-genai; read when some SDK puts it on the span instead).
GEN_AI_INFERENCE_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
#: Attributes (of spans or span events) that carry message content in the GenAI formats
#: above, and in flattened ones (OpenLLMetry's gen_ai.prompt.{i}.content). agenttrace applies its
#: content policy to them in spans of other instrumentations (docs/llm-calls.md).
GEN_AI_CONTENT_ATTRIBUTES = frozenset(
    {
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_SYSTEM_INSTRUCTIONS,
        GEN_AI_TOOL_DEFINITIONS,
        GEN_AI_TOOL_CALL_ARGUMENTS,
        GEN_AI_TOOL_CALL_RESULT,
        GEN_AI_PROMPT,
        GEN_AI_COMPLETION,
        GEN_AI_EVENT_CONTENT,
    }
)
GEN_AI_CONTENT_PREFIXES = (GEN_AI_PROMPT + ".", GEN_AI_COMPLETION + ".")
GEN_AI_FLATTENED_CONTENT_LEAVES = (".content", ".arguments")
# OpenLLMetry (Traceloop) marks its model-call spans ("openai.chat") with this key.
LLM_REQUEST_TYPE = "llm.request.type"
LLM_REQUEST_TYPES_MODEL = frozenset({"chat", "completion"})

# --- exception event (OpenTelemetry general conventions) ----------------------------------
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"

# --- log records carrying trajectories (OTLP logs sink) ------------------------------------
TRAJECTORY_EVENT_NAME = "rl.trajectory"


def llm_span_name(model: str | None, operation: str = GEN_AI_OPERATION_CHAT) -> str:
    """GenAI span name: ``{operation} {model}``, or just the operation when model is unknown."""
    return f"{operation} {model}" if model else operation


# --- export content policy (docs/export-content.md) ---------------------------------------
# Set by ContentPolicyExporter on spans (and span events) it changed on their way to an
# exporter; never on the spans the trajectory processor sees. Each is a string array of the
# attribute keys concerned. Readers (agenttrace export) turn them into SpanRecord.lossy
# entries, resolve blob references, and drop the markers, so trajectories never carry them.
#: Agenttrace's own content attributes (JSON text); GEN_AI_CONTENT_ATTRIBUTES are the others.
RL_CONTENT_ATTRIBUTES = frozenset({OBSERVATION, ACTION, INFO})
#: Keys whose values were cut to the export limit (still valid JSON when they were JSON).
CONTENT_TRUNCATED = "agenttrace.content.truncated"
#: Keys whose values were removed (the ``none`` export policy).
CONTENT_REMOVED = "agenttrace.content.removed"
#: Keys whose values were replaced by a blob reference ``{"$blob": {"ref", "size"}}``.
CONTENT_BLOBS = "agenttrace.content.blobs"
CONTENT_MARKERS = (CONTENT_TRUNCATED, CONTENT_REMOVED, CONTENT_BLOBS)

"""Settings: one table, each option an argument and an ``AGENTTRACE_*`` environment variable.

Resolution order: explicit argument > environment variable > default. A bad value raises
:class:`ConfigError` naming the setting and where the value came from (a bad variable of a
setting only the auto-instrumentor reads is reported in one line and left at its default
instead; docs/configuration.md, "Mistakes fail loudly, once"). The standard
``OTEL_*`` variables keep their meaning (service name, OTLP endpoint and headers, ...); the
table in docs/configuration.md is generated from ``SETTINGS`` by a test, so it cannot drift.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from agenttrace.config_values import (
    GIB,
    Number,
    _bytes,
    _count,
    _parse_blob_store,
    _parse_bool,
    _parse_callable,
    _parse_conventions,
    _parse_list,
    _seconds,
)

logger = logging.getLogger("agenttrace")


class ConfigError(ValueError):
    """A setting has a value agenttrace cannot use."""


class OutputFolderError(ConfigError, OSError):
    """The output folder (``out`` / ``AGENTTRACE_OUT``) cannot be created or written to.

    A :class:`ConfigError`, and an :class:`OSError` too, for callers that handle file errors.
    """


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    #: Read only by the auto-instrumentor (AgentTraceInstrumentor), never by the pipeline: a
    #: bad value in the environment is reported in one line and the default used instead.
    instrumentor_only: bool = False
    #: A file or folder: configure() takes an os.PathLike for it too.
    path: bool = False

    @property
    def kind(self) -> str:
        """number, bool, list, callable, conventions, choice or string: what the value is."""
        if isinstance(self.parse, Number):
            return "number"
        if self.parse is _parse_bool:
            return "bool"
        if self.parse is _parse_list:
            return "list"
        if self.parse is _parse_callable:
            return "callable"
        if self.parse is _parse_conventions:
            return "conventions"
        return "choice" if self.choices else "string"


SINK_CHOICES = ("jsonl", "parquet", "steps", "minari", "jsondir", "otlp")
SPAN_EXPORT_CHOICES = ("file", "otlp", "none")
CONTENT_CHOICES = ("full", "none")
EXPORT_CONTENT_CHOICES = ("full", "truncate", "ref", "none")
#: The export content limit's default and minimum (agenttrace.processing.span_content).
EXPORT_MAX_BYTES_DEFAULT = 2000
EXPORT_MAX_BYTES_MIN = 64
WRITER_CHOICES = ("auto", "process", "thread")
METRICS_CHOICES = ("auto", "otlp", "none")
PROPAGATE_CHOICES = ("threads", "httpx", "aiohttp")

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "enabled",
        "AGENTTRACE_ENABLED",
        _parse_bool,
        True,
        "Master switch. When false no spans are made and nothing is written.",
    ),
    Setting(
        "out",
        "AGENTTRACE_OUT",
        str,
        "agenttrace_runs",
        "Folder under which each run gets its own run folder.",
        path=True,
    ),
    Setting(
        "run_name",
        "AGENTTRACE_RUN_NAME",
        str,
        None,
        "Name of the run folder (default: run-<UTC time>-<pid>). Made safe for a file name.",
    ),
    Setting(
        "sinks",
        "AGENTTRACE_SINKS",
        _parse_list,
        ("jsonl",),
        "Where trajectories go, comma-separated (steps: typed step and episode tables, "
        "docs/step-tables.md; minari: a Minari dataset, docs/minari.md).",
        SINK_CHOICES,
    ),
    Setting(
        "spans",
        "AGENTTRACE_SPANS",
        _parse_list,
        None,
        "Where spans go, comma-separated. Default: file, plus otlp when an "
        "OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set and agenttrace owns the provider.",
        SPAN_EXPORT_CHOICES,
    ),
    Setting(
        "collect",
        "AGENTTRACE_COLLECT",
        str,
        None,
        "URL of an agenttrace collect service (http://host:4318) that writes this run's "
        "trajectories: spans go there whole (OTLP/HTTP, full content) and this process "
        "rebuilds nothing itself; no span file unless spans names file (docs/collect.md).",
    ),
    Setting(
        "metrics",
        "AGENTTRACE_METRICS",
        str,
        "auto",
        "Episode metrics (docs/metrics.md): auto records them on the meter_provider given to "
        "configure(), else on the global one when it is an SDK MeterProvider, else sends them "
        "over OTLP when an OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT is set and agenttrace owns "
        "the tracer provider; otlp always sends them over OTLP; none records nothing.",
        METRICS_CHOICES,
    ),
    Setting(
        "content",
        "AGENTTRACE_CONTENT",
        str,
        "full",
        "Content policy for observations, actions, info and LLM messages in spans: "
        "full or none (rewards and termination are always recorded).",
        CONTENT_CHOICES,
    ),
    Setting(
        "export_content",
        "AGENTTRACE_EXPORT_CONTENT",
        str,
        "truncate",
        "Content policy for spans sent to a tracing backend (trajectories and spans.jsonl "
        "always keep full content): truncate (values over export_max_bytes cut to still-valid "
        "JSON), full, ref (values over the limit go to blob_store and the span carries a "
        "reference) or none (content left out). Flagged on the span; docs/export-content.md.",
        EXPORT_CONTENT_CHOICES,
    ),
    Setting(
        "export_max_bytes",
        "AGENTTRACE_EXPORT_MAX_BYTES",
        _bytes(EXPORT_MAX_BYTES_MIN, GIB),
        EXPORT_MAX_BYTES_DEFAULT,
        "Largest content value (UTF-8 bytes) exported inline under truncate and ref. The "
        "default stays under Grafana Tempo's 2048-byte attribute limit.",
    ),
    Setting(
        "blob_store",
        "AGENTTRACE_BLOB_STORE",
        _parse_blob_store,
        None,
        "Folder or URL (file://, or any fsspec URL such as s3://bucket/blobs, which needs the "
        "fsspec package) of the content-addressed store for export_content=ref. Checked "
        "when agenttrace starts: a scheme fsspec does not know, or whose filesystem package "
        "is not installed, is an error then.",
        path=True,
    ),
    Setting(
        "redact",
        "AGENTTRACE_REDACT",
        _parse_callable,
        None,
        "Import path of a function (key, value) -> value that scrubs content before it "
        "is recorded.",
    ),
    Setting(
        "service_name",
        "AGENTTRACE_SERVICE_NAME",
        str,
        None,
        "service.name of agenttrace's own TracerProvider (else OTEL_SERVICE_NAME, else "
        "'agenttrace').",
    ),
    Setting(
        "max_open_episodes",
        "AGENTTRACE_MAX_OPEN_EPISODES",
        _count(),
        10_000,
        "Episodes held open at once; more are counted as dropped, never silently.",
    ),
    Setting(
        "max_episode_bytes",
        "AGENTTRACE_MAX_EPISODE_BYTES",
        _bytes(),
        64 * 1024 * 1024,
        "Memory one episode's spans may hold while it is rebuilt; a longer episode is rebuilt "
        "a stretch of steps at a time, its finished steps kept on disk (nothing is cut).",
    ),
    Setting(
        "idle_timeout",
        "AGENTTRACE_IDLE_TIMEOUT",
        _seconds(),
        600.0,
        "Seconds without a new span after which an episode that never ended is written "
        "as incomplete.",
    ),
    Setting(
        "queue_size",
        "AGENTTRACE_QUEUE_SIZE",
        _count(),
        65_536,
        "Capacity of each background queue (finished episodes, spans to export).",
    ),
    Setting(
        "block_timeout",
        "AGENTTRACE_BLOCK_TIMEOUT",
        _seconds(),
        30.0,
        "Seconds a caller waits for room in a full queue before an item is dropped (and counted).",
    ),
    Setting(
        "writer",
        "AGENTTRACE_WRITER",
        str,
        "auto",
        "Where trajectories are rebuilt and files written: process (a helper process, so the "
        "work runs on another core instead of slowing your loop), thread (a thread of this "
        "process) or auto (process when 2+ CPUs are available and every sink is a built-in "
        "one; else thread).",
        WRITER_CHOICES,
    ),
    Setting(
        "jsonl_max_bytes",
        "AGENTTRACE_JSONL_MAX_BYTES",
        _bytes(),
        256 * 1024 * 1024,
        "Size at which trajectory and span JSONL files rotate to a new part.",
    ),
    Setting(
        "lean_spans",
        "AGENTTRACE_LEAN_SPANS",
        _parse_bool,
        True,
        "Start agenttrace's own spans without the SDK's per-span sampler call and attribute "
        "re-checks when the provider uses the default sampler, id generator and limits (the "
        "same SDK spans reach every processor; docs/writer.md, Overhead). false: always the "
        "SDK's own path.",
    ),
    Setting(
        "tokens",
        "AGENTTRACE_TOKENS",
        _parse_bool,
        False,
        "Record the token ids and log-probabilities an OpenAI-compatible server returns with a "
        "model call (vLLM's return_token_ids and logprobs, SGLang's) on its llm span, for "
        "agenttrace export --format tokens (docs/tokens.md).",
    ),
    Setting(
        "tokens_max",
        "AGENTTRACE_TOKENS_MAX",
        _count(),
        131_072,
        "Longest token list kept per model call (prompt ids, completion ids, logprobs); a longer "
        "one is cut, and the call marked rl.llm.tokens_cut.",
    ),
    Setting(
        "group_id",
        "AGENTTRACE_GROUP_ID",
        str,
        None,
        "Group id (rl.group.id) of every episode this process records that has none of its "
        "own: the rollouts of one task (GRPO, best-of-n) run by one launcher.",
    ),
    Setting(
        "group_size",
        "AGENTTRACE_GROUP_SIZE",
        _count(),
        None,
        "How many episodes that group has (rl.group.size), when known.",
    ),
    Setting(
        "minari_dataset_id",
        "AGENTTRACE_MINARI_DATASET_ID",
        str,
        None,
        "Id of the Minari dataset the minari sink writes, NAMESPACE/NAME-v0 (default: "
        "agenttrace/<run name>-v0), in Minari's folder (MINARI_DATASETS_PATH; docs/minari.md).",
    ),
    Setting(
        "conventions",
        "AGENTTRACE_CONVENTIONS",
        _parse_conventions,
        None,
        "Read spans that other tracers emit as agenttrace's: comma-separated presets (runner, "
        "genai, openinference, traceloop, agentlightning) and TOML or JSON mapping files. The "
        "live processor and agenttrace export rebuild trajectories from such spans with no "
        "targets (docs/conventions.md).",
    ),
    Setting(
        "targets",
        "AGENTTRACE_TARGETS",
        str,
        None,
        "Functions and methods the auto-instrumentor traces without code changes, "
        "e.g. 'pkg.env:Env.step=env.step;pkg.run:Runner.play=episode[task_id=task.id]' "
        "(syntax in docs/auto-instrumentation.md). Read by AgentTraceInstrumentor, "
        "not by configure().",
        instrumentor_only=True,
    ),
    Setting(
        "targets_file",
        "AGENTTRACE_TARGETS_FILE",
        str,
        None,
        "Path of a TOML or JSON file listing more targets for the auto-instrumentor "
        "(format in docs/auto-instrumentation.md). A file that cannot be read or parsed is "
        "reported in one line; the targets of AGENTTRACE_TARGETS are instrumented all the same.",
        instrumentor_only=True,
        path=True,
    ),
    Setting(
        "propagate",
        "AGENTTRACE_PROPAGATE",
        _parse_list,
        None,
        "Libraries the auto-instrumentor patches so work and requests made inside an episode "
        "carry it, comma-separated: threads (ThreadPoolExecutor.submit and map, so "
        "loop.run_in_executor too, run work in the submitter's context), httpx "
        "(Client/AsyncClient.send add traceparent and episode baggage), aiohttp (every "
        "web.Application runs its handlers in the caller's context). Default: none, "
        "library behaviour unchanged (docs/context-propagation.md). Read by "
        "AgentTraceInstrumentor, not by configure().",
        PROPAGATE_CHOICES,
        instrumentor_only=True,
    ),
    Setting(
        "flush_interval",
        "AGENTTRACE_FLUSH_INTERVAL",
        _seconds(),
        1.0,
        "Longest time, in seconds, between hand-overs to the writer: finished episodes and the "
        "spans of open episodes reach the files within about this long, which bounds what a "
        "crash (SIGKILL) can lose (docs/durability.md).",
    ),
    Setting(
        "exit_timeout",
        "AGENTTRACE_EXIT_TIMEOUT",
        _seconds(),
        5.0,
        "Seconds agenttrace may take at interpreter exit, on SIGTERM and when a worker process "
        "ends to write and send what it holds (finished and open episodes, spans queued for "
        "the OTLP endpoint, the last metrics export), all of it within this one deadline; "
        "files are finished first. What is not done by then is counted and reported in the "
        "exit line.",
    ),
    Setting(
        "exit_report",
        "AGENTTRACE_EXIT_REPORT",
        _parse_bool,
        True,
        "When the pipeline shuts down (at exit, or at an explicit shutdown() or configure() "
        "that replaces it), say on stderr in one line how many episodes it wrote and where, "
        "and what was lost if anything (agenttrace: 12 episodes -> "
        "agenttrace_runs/run-.../trajectories.jsonl). Nothing when it wrote nothing.",
    ),
    Setting(
        "warn_uncalled_targets",
        "AGENTTRACE_WARN_UNCALLED_TARGETS",
        _parse_bool,
        True,
        "At exit, warn in one line about auto-instrumentation targets that were installed "
        "but never called in this process, so that 'nothing traced' is never silent. Read by "
        "AgentTraceInstrumentor, not by configure().",
        instrumentor_only=True,
    ),
    Setting(
        "env_episodes",
        "AGENTTRACE_ENV_EPISODES",
        _parse_bool,
        True,
        "With targets on an environment's reset and step methods, outside any episode: each "
        "env instance's reset-to-terminal run is an episode of its own "
        "(docs/auto-instrumentation.md). false: such calls stay outside any episode. Read by "
        "AgentTraceInstrumentor, not by configure().",
        instrumentor_only=True,
    ),
    Setting(
        "gymnasium",
        "AGENTTRACE_GYMNASIUM",
        _parse_bool,
        False,
        "Record every gymnasium environment the program makes, with no code: "
        "instrument_gymnasium() runs when gymnasium is first imported, so environments from "
        "gymnasium.make are TracedEnv-wrapped and vector environments from gymnasium.make_vec "
        "TracedVectorEnv-wrapped (an episode per reset-to-terminal run, docs/env-wrappers.md). "
        "Read by AgentTraceInstrumentor, not by configure().",
        instrumentor_only=True,
    ),
)
_BY_NAME = {setting.name: setting for setting in SETTINGS}

#: ``AGENTTRACE_*`` variables read outside :data:`SETTINGS`; the check for misspelt variables
#: leaves them alone. Keep this list current when code, the stack or CI reads a new one.
OTHER_VARIABLES: tuple[str, ...] = (
    "AGENTTRACE_EXPORT_HEADERS",  # agenttrace/storage/http.py: `agenttrace export` auth
    "AGENTTRACE_EXPORT_TOKEN",  # agenttrace/storage/http.py
    "AGENTTRACE_UID",  # docker-compose.yml: owner of the stack's span files
    "AGENTTRACE_GID",  # docker-compose.yml
    "AGENTTRACE_SPANS_DIR",  # docker-compose.yml: where the collector writes span files
    "AGENTTRACE_TRAJECTORIES_DIR",  # docker-compose.yml: where agenttrace-collect writes
    "AGENTTRACE_REQUIRE_PROMETHEUS",  # tests and .ci/run: fail instead of skipping
    "AGENTTRACE_REQUIRE_NODE",  # tests and .ci/run: the Node.js producer fails, never skips
    "AGENTTRACE_REQUIRE_CHROMIUM",  # tests and .ci/run: the viewer's browser tests never skip
)
_PREFIX = "AGENTTRACE_"


@dataclass(frozen=True)
class Settings:
    enabled: bool
    out: str
    run_name: str | None
    sinks: tuple[str, ...]
    spans: tuple[str, ...] | None
    collect: str | None
    metrics: str
    content: str
    export_content: str
    export_max_bytes: int
    blob_store: str | None
    redact: Callable[[str, Any], Any] | None
    service_name: str | None
    max_open_episodes: int
    max_episode_bytes: int
    idle_timeout: float
    queue_size: int
    block_timeout: float
    writer: str
    jsonl_max_bytes: int
    lean_spans: bool
    tokens: bool
    tokens_max: int
    group_id: str | None
    group_size: int | None
    minari_dataset_id: str | None
    conventions: Any  # agenttrace.trajectory.conventions.Conventions | None
    targets: str | None
    targets_file: str | None
    propagate: tuple[str, ...] | None
    flush_interval: float
    exit_timeout: float
    exit_report: bool
    warn_uncalled_targets: bool
    env_episodes: bool
    gymnasium: bool


def resolve(environ: Mapping[str, str] | None = None, **explicit: Any) -> Settings:
    """Settings from explicit values (None = not given), then the environment, then defaults.

    Raises :class:`ConfigError` for the first bad value: an explicit one names the setting, one
    from the environment the variable too. A bad variable of a setting only the
    auto-instrumentor reads is reported in one line instead and its default used
    (:func:`report_once`); the pipeline never reads those.
    """
    environ = os.environ if environ is None else environ
    warn_unknown_variables(environ)
    unknown = sorted(set(explicit) - set(_BY_NAME))
    if unknown:
        named = [name + _did_you_mean(name, list(_BY_NAME)) for name in unknown]
        raise ConfigError(
            f"unknown setting(s): {', '.join(named)}; "
            "the settings are listed in docs/configuration.md"
        )
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        given = explicit.get(setting.name)
        if given is not None:
            value = _check_explicit(setting, given)
        else:
            value = _from_environment(setting, environ)
        values[setting.name] = value
    assert {f.name for f in fields(Settings)} == set(values)
    _check_export_content(values)
    _check_collect(values)
    return Settings(**values)


def _check_collect(values: dict[str, Any]) -> None:
    """``collect`` is the base URL of a service, where spans go over OTLP/HTTP."""
    url = values.get("collect")
    if not url:
        values["collect"] = None
        return
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest.strip("/"):
        raise ConfigError(
            f"collect={url!r} (AGENTTRACE_COLLECT): expected the service's URL, such as "
            "http://127.0.0.1:4318"
        )
    values["collect"] = url.rstrip("/")


def defaults(**overrides: Any) -> Settings:
    """Every setting at its default (``overrides`` aside), without reading the environment."""
    values = {setting.name: setting.default for setting in SETTINGS}
    values.update(overrides)
    return Settings(**values)


def unknown_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A message for each ``AGENTTRACE_*`` variable that nothing in agenttrace reads.

    Such a variable is almost always a misspelt setting (``AGENTTRACE_SINK``), which would
    otherwise be ignored without a word; the message names the closest known variable.
    """
    environ = os.environ if environ is None else environ
    known = [setting.env for setting in SETTINGS] + list(OTHER_VARIABLES)
    # Compared without the common prefix, which would make every name look close.
    tails = [k[len(_PREFIX) :] for k in known]
    messages = {}
    for name in sorted(environ):
        if not name.startswith(_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name[len(_PREFIX) :], tails, n=1, cutoff=0.6)
        hint = (
            f"did you mean {_PREFIX}{close[0]}?"
            if close
            else "the variables are listed in docs/configuration.md"
        )
        messages[name] = f"agenttrace: {name} is not a variable agenttrace reads (ignored); {hint}"
    return messages


_warned_variables: set[str] = set()


def warn_unknown_variables(environ: Mapping[str, str] | None = None) -> None:
    """Log :func:`unknown_variables`, each variable once per process."""
    for name, message in unknown_variables(environ).items():
        if name not in _warned_variables:
            _warned_variables.add(name)
            logger.warning("%s", message)


def _did_you_mean(value: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_export_content(values: dict[str, Any]) -> None:
    if values["export_content"] == "ref" and not (values["blob_store"] or "").strip():
        raise ConfigError(
            "export_content='ref' (AGENTTRACE_EXPORT_CONTENT) needs a blob store: set "
            "blob_store / AGENTTRACE_BLOB_STORE to a folder or URL"
        )


_reported: set[str] = set()


def report_once(key: str, message: str) -> None:
    """Log ``message`` as an error, in one line, the first time ``key`` comes up in this
    process (a forked child inherits what its parent said). For bad settings found without an
    explicit ``configure()``: the program goes on, and a setting read twice (by the pipeline
    and by the auto-instrumentor, or again after ``shutdown()``) is not reported twice."""
    if key in _reported:
        return
    _reported.add(key)
    logger.error("%s", one_line(message))


def one_line(text: str) -> str:
    """``text`` on one line: its line breaks become spaces (a value's own spacing stays)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def read_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One setting from the environment (else its default), without resolving the others.

    For readers that need a single value and must not fail because another setting is bad
    (the auto-instrumentor reads its targets this way). A bad value raises
    :class:`ConfigError`, except for a setting only the auto-instrumentor reads: that one is
    reported in one line (once per process) and its default returned.
    """
    setting = _BY_NAME.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting: {name}")
    environ = os.environ if environ is None else environ
    warn_unknown_variables(environ)
    return _from_environment(setting, environ)


def read_setting_or(name: str, default: Any) -> Any:
    """:func:`read_setting`, or ``default`` when its value is bad (configure() reports it)."""
    try:
        return read_setting(name)
    except ConfigError:
        return default


def parse_setting(name: str, value: Any) -> Any:
    """One setting's value given in code, parsed and checked as ``configure()`` does.

    For readers of a single setting that also take it as an argument (the auto-instrumentor's
    ``propagate=``); raises :class:`ConfigError` naming the setting.
    """
    setting = _BY_NAME.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting: {name}")
    return _check_explicit(setting, value)


#: The longest value repeated in a message; a longer one is cut (its length said).
_SHOWN_MAX = 200


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) <= _SHOWN_MAX:
        return text
    return f"{text[:_SHOWN_MAX]}... ({len(text)} characters)"


def _from_environment(setting: Setting, environ: Mapping[str, str]) -> Any:
    """The setting's environment variable, parsed and checked; its default when unset.

    An empty variable (or one of spaces only) is unset, as for the OTEL_* variables.
    """
    raw = environ.get(setting.env, "")
    if not raw.strip():
        return setting.default
    try:
        return _parse_environment(setting, raw)
    except ConfigError as exc:
        if not setting.instrumentor_only:
            raise
        report_once(
            f"{setting.env}={raw}",
            f"agenttrace: {exc}; using the default ({_default_text(setting)})",
        )
        return setting.default


def _parse_environment(setting: Setting, raw: str) -> Any:
    where = f"{setting.env}={_shown(raw)}"
    try:
        value = setting.parse(raw.strip() if setting.kind == "choice" else raw)
        if setting.kind == "list":
            _check_names_something(setting, value)
    except Exception as exc:
        reason = one_line(str(exc)) or type(exc).__name__
        raise ConfigError(f"{where} is not a valid value for {setting.name}: {reason}") from exc
    _check_choices(setting, value, where)
    return value


def _default_text(setting: Setting) -> str:
    default = setting.default
    if default is None:
        return "none"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join(default)
    return str(default)


def _check_names_something(setting: Setting, value: tuple[str, ...]) -> None:
    """A text that names no item (``,,,``) is a mistake: it never means "none"."""
    if not value:
        choices = f"; choose from {', '.join(setting.choices)}" if setting.choices else ""
        raise ValueError(f"it names no {setting.name}{choices}")


def _check_explicit(setting: Setting, value: Any) -> Any:
    """A value given to ``configure()``: the right type, in range, one of the choices; else
    :class:`ConfigError` naming the setting and the value."""
    where = f"{setting.name}={_shown(value)} ({setting.env})"
    try:
        value = _explicit_value(setting, value, where)
    except ConfigError:
        raise
    except Exception as exc:
        reason = one_line(str(exc)) or type(exc).__name__
        raise ConfigError(f"{where}: {reason}") from exc
    _check_choices(setting, value, where)
    return value


def _explicit_value(setting: Setting, value: Any, where: str) -> Any:
    kind = setting.kind
    if kind == "number":
        return setting.parse(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _parse_bool(value)
        raise ValueError(f"expected true or false, got {type(value).__name__}")
    if kind == "list":
        if isinstance(value, str):
            names = _parse_list(value)
            _check_names_something(setting, names)
            return names
        if isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                if not isinstance(item, str):
                    raise ValueError(
                        f"expected names (strings), got {type(item).__name__} {_shown(item)}"
                    )
            return tuple(item.strip().lower() for item in value)
        raise ValueError(
            f"expected a comma-separated string or a list of names, got {type(value).__name__}"
        )
    if kind == "callable":
        if isinstance(value, str):
            return _parse_callable(value)
        if not callable(value):
            raise ValueError(f"must be callable, got {type(value).__name__}")
        return value
    if kind == "conventions":
        return setting.parse(value)
    # text: plain strings and choices
    if setting.path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        accepted = "a string or a path" if setting.path else "a string"
        raise ValueError(f"expected {accepted}, got {type(value).__name__}")
    if not value.strip():
        raise ValueError("must not be empty (leave it out, or pass None, for the default)")
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    if setting.parse is not str:
        value = setting.parse(value)
    return value


def _check_choices(setting: Setting, value: Any, where: str) -> None:
    if not setting.choices:
        return
    items = value if isinstance(value, tuple) else (value,)
    bad = [item for item in items if item not in setting.choices]
    if bad:
        hints = "".join(_did_you_mean(str(item), setting.choices) for item in bad[:1])
        raise ConfigError(
            f"{where}: unknown {setting.name} {', '.join(map(_shown, bad))}{hints}; "
            f"choose from {', '.join(setting.choices)}"
        )


def settings_table_markdown() -> str:
    """The configuration reference table (docs/configuration.md embeds it)."""
    lines = ["| argument | environment variable | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = ",".join(s.default) if isinstance(s.default, tuple) else s.default
        choices = f" Choices: {', '.join(s.choices)}." if s.choices else ""
        allowed = f" Allowed: {s.parse.describe()}." if isinstance(s.parse, Number) else ""
        lines.append(f"| `{s.name}` | `{s.env}` | `{default}` | {s.help}{choices}{allowed} |")
    return "\n".join(lines)

"""Auto-instrumentation targets: which function or method to trace, in which role, and how.

A target is written ``module:Qualified.name=role`` with optional ``[key=value,...]``::

    pkg.runner:Runner.play_episode=episode[task_id=task.id]
    pkg.env:Env.step=env.step[extractor=gymnasium]
    pkg.env:Env.step=env.step[extractor=pkg.readers:read_step,action=request.action]
    pkg.agent:Agent.generate=llm[final_on=length,reward=0,terminated=true]
    pkg.runner:Runner.play_episode=episode[episode_id=return.episode_id,error=return.error_info]
    pkg.env:Env.get_episode_id=episode.fields[episode_id=return]

Several targets are separated by ``;`` or new lines (``AGENTTRACE_TARGETS``). A file
(``AGENTTRACE_TARGETS_FILE``, TOML or JSON) lists them under ``targets``, as such strings or
as tables with ``path``, ``role``, ``extractor``, ``arguments`` and ``settings``. An option is
an *argument* option (a field the role records, read from the named argument of each call) or
a *setting* (a fixed value: ``final_on=length``, ``index_base=1``). On ``episode`` and
``episode.fields`` targets a path may start with ``return``: the call's return value, read
when it returns (agenttrace.instrument.episode_fields).
docs/auto-instrumentation.md is the user guide.

This module only parses and resolves (imports the module, finds the attribute, checks it is a
function or method, works out how it binds). Patching is agenttrace.instrument.auto's job.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc
from agenttrace.instrument.calls import LLMCallScope, ToolCallScope
from agenttrace.instrument.episode_fields import (
    EPISODE_FIELDS,
    RECEIVER_NAME,
    RETURN,
    EpisodeFieldsScope,
)
from agenttrace.instrument.episode_scope import LATE_FIELDS, EpisodeScope
from agenttrace.instrument.extractors import EXTRACTORS
from agenttrace.instrument.scope import _Scope
from agenttrace.instrument.step_scopes import (
    AgentActScope,
    EnvResetScope,
    EnvStepScope,
    StepRecordScope,
    TimestepScope,
)

#: Role name -> the scope class whose per-call logic a target of that role uses.
ROLES: dict[str, type[_Scope]] = {
    cls.role: cls
    for cls in (
        EpisodeScope,
        EnvResetScope,
        TimestepScope,
        AgentActScope,
        EnvStepScope,
        LLMCallScope,
        ToolCallScope,
        StepRecordScope,
        EpisodeFieldsScope,
    )
}

#: Per role, the fields an argument of the traced call can be named as (``task_id=task.id``).
#: Each field is what that role's decorator already reads from an argument of that name; the
#: episode's per-call options (its id, policy version, agent and env names) are read, before
#: its span starts, only when a target names them. ``error`` (and any field read from the
#: return value, ``return.x``) is set when the call returns (agenttrace.instrument.episode_fields).
ARGUMENT_FIELDS: dict[str, tuple[str, ...]] = {
    sc.EPISODE: ("task_id", "env", "seed", *EpisodeScope.PER_CALL_OPTIONS, "error"),
    EPISODE_FIELDS: LATE_FIELDS,
    sc.ENV_RESET: ("seed",),
    sc.TIMESTEP: (),
    sc.AGENT_ACT: ("observation",),
    sc.ENV_STEP: ("action",),
    LLMCallScope.role: ("model", "messages"),
    sc.STEP_RECORD: StepRecordScope.FIELDS,
    ToolCallScope.role: ("name", "arguments", "call_id", "result"),
}


#: ``attributes.NAME=ARG`` on an episode target: the argument (a whole dict, say the
#: runner's ``reset_kwargs``) becomes the episode's attribute NAME, through the content policy.
ATTRIBUTE_OPTION = "attributes."
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
#: Roles whose options may read the call's return value (``episode_id=return.id``).
RETURN_ROLES = (sc.EPISODE, EPISODE_FIELDS)


def _is_attribute_option(role: str, name: str) -> bool:
    return (
        role in RETURN_ROLES
        and name.startswith(ATTRIBUTE_OPTION)
        and bool(_ATTRIBUTE_NAME.fullmatch(name[len(ATTRIBUTE_OPTION) :]))
    )


def _finish_reasons(value: Any) -> tuple[str, ...]:
    """``length`` or ``length|content_filter`` (text), or a list of reasons (a file)."""
    reasons = value.split("|") if isinstance(value, str) else value
    if not isinstance(reasons, (list, tuple)) or not reasons:
        raise ValueError("expected a finish reason or several joined by '|' (length|stop)")
    cleaned = tuple(str(reason).strip() for reason in reasons)
    if not all(cleaned):
        raise ValueError("a finish reason is empty")
    return cleaned


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError("expected a finite number")
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


def _integer(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("expected an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError("expected an integer") from None


#: Per role, its settings (fixed values, not arguments): name -> (reader of the value, the
#: keyword of the role's scope it is given as).
SETTINGS: dict[str, dict[str, tuple[Callable[[Any], Any], str]]] = {
    LLMCallScope.role: {
        "final_on": (_finish_reasons, "final_on"),
        "reward": (_number, "final_reward"),
        "terminated": (_flag, "final_terminated"),
        "truncated": (_flag, "final_truncated"),
    },
    sc.STEP_RECORD: {"index_base": (_integer, "index_base")},
}

#: Roles whose return value is read by an extractor: a step result (env.step, timestep) or
#: what a model returned (llm: a ``module:function`` only, see instrument.llm_results).
EXTRACTOR_ROLES = (sc.ENV_STEP, sc.TIMESTEP, LLMCallScope.role)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_NAME}(?:\.{_NAME})*"
_PATH = re.compile(rf"^(?P<module>{_DOTTED}):(?P<qualname>{_DOTTED})$")
_ENTRY = re.compile(
    r"^(?P<path>[^=\[\]\s]+)\s*=\s*(?P<role>[A-Za-z_.]+)\s*(?:\[(?P<options>[^\[\]]*)\])?$"
)
_ARGUMENT_PATH = re.compile(rf"^{_DOTTED}$")
_FILE_KEYS = ("path", "role", "extractor", "arguments", "settings")
# (RECEIVER_NAME, ``self`` in ``env=self.env``, is the object or class a method is called on;
# RETURN, ``return`` in ``episode_id=return.id``, the call's return value.)


class TargetError(ValueError):
    """A target cannot be used; the message names it and says why."""


@dataclass(frozen=True)
class Target:
    """One function or method to trace.

    ``path`` is ``module:Qualified.name``; ``role`` one of :data:`ROLES`; ``extractor`` (roles
    env.step and timestep) a built-in extractor name, a ``module:function`` import path or a
    callable ``result -> StepResult | None``; ``arguments`` maps a field the role records
    (:data:`ARGUMENT_FIELDS`) to the argument holding it, optionally followed by attribute or
    key names (``{"task_id": "task.id"}``); ``settings`` gives the role's fixed options
    (:data:`SETTINGS`, ``{"final_on": "length"}``).
    """

    path: str
    role: str
    extractor: str | Callable[[Any], Any] | None = None
    arguments: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not _PATH.match(self.path.strip()):
            raise TargetError(
                f"target {self.path!r}: expected 'package.module:Class.method' or "
                "'package.module:function'"
            )
        object.__setattr__(self, "path", self.path.strip())
        if self.role not in ROLES:
            raise TargetError(
                f"target {self.path}: unknown role {self.role!r}; use one of {', '.join(ROLES)}"
            )
        if self.extractor is not None:
            if self.role not in EXTRACTOR_ROLES:
                raise TargetError(
                    f"target {self.path}: role {self.role} takes no extractor (only "
                    f"{', '.join(EXTRACTOR_ROLES)} read what the call returns)"
                )
            if isinstance(self.extractor, str):
                if self.role == LLMCallScope.role and not _PATH.match(self.extractor):
                    raise TargetError(
                        f"target {self.path}: an llm extractor is the import path of your "
                        f"reader ('package.module:function'), got {self.extractor!r}; without "
                        "one, OpenAI responses, plain dicts and text are read as they are"
                    )
                if self.extractor not in EXTRACTORS and not _PATH.match(self.extractor):
                    raise TargetError(
                        f"target {self.path}: extractor {self.extractor!r} is neither a "
                        f"built-in one ({', '.join(EXTRACTORS)}) nor an import path like "
                        "'package.module:function'"
                    )
            elif not callable(self.extractor):
                raise TargetError(f"target {self.path}: extractor must be a name or callable")
        arguments = dict(self.arguments)
        allowed = ARGUMENT_FIELDS[self.role]
        object.__setattr__(self, "settings", self._checked_settings())
        for name, where in arguments.items():
            if name not in allowed and not _is_attribute_option(self.role, name):
                accepted = (*allowed, *SETTINGS.get(self.role, ()))
                if self.role in RETURN_ROLES:
                    accepted = (*accepted, f"{ATTRIBUTE_OPTION}NAME")
                if name == "error":
                    raise TargetError(
                        f"target {self.path}: error={where}: only {' and '.join(RETURN_ROLES)} "
                        "targets take error (the error a runner reports, e.g. "
                        "error=return.error_info)"
                    )
                if self.role in EXTRACTOR_ROLES:
                    accepted = (*accepted, "extractor")
                raise TargetError(
                    f"target {self.path}: role {self.role} has no option {name!r}; it accepts "
                    + (", ".join(accepted) if accepted else "none")
                )
            if not isinstance(where, str) or not _ARGUMENT_PATH.match(where):
                raise TargetError(
                    f"target {self.path}: {name}={where!r} must name an argument, optionally "
                    "followed by attribute or key names (e.g. task.id)"
                )
            self._check_return_path(name, where)
        if self.role == EPISODE_FIELDS and not arguments:
            raise TargetError(
                f"target {self.path}: an {EPISODE_FIELDS} target sets the fields it names; "
                f"name one (e.g. episode_id=return): {', '.join(LATE_FIELDS)} or "
                f"{ATTRIBUTE_OPTION}NAME"
            )
        object.__setattr__(self, "arguments", arguments)

    def _check_return_path(self, name: str, where: str) -> None:
        """``return...`` only where a return value is read, for fields that can wait for it."""
        reads_return = where.split(".")[0] == RETURN
        if self.role == ToolCallScope.role and name == "result":
            if not reads_return:
                raise TargetError(
                    f"target {self.path}: result={where}: a tool's result is read from its "
                    "return value (result=return.NAME, for a framework that wraps it)"
                )
            return
        if reads_return and self.role not in RETURN_ROLES:
            raise TargetError(
                f"target {self.path}: {name}={where}: role {self.role} does not read the "
                f"return value; only {' and '.join(RETURN_ROLES)} targets take return paths"
            )
        if self.role != sc.EPISODE:
            return
        if reads_return and name not in LATE_FIELDS and not name.startswith(ATTRIBUTE_OPTION):
            raise TargetError(
                f"target {self.path}: {name}={where}: {name} is read when the call starts, "
                f"before there is a return value; from the return value an episode takes "
                f"{', '.join(LATE_FIELDS)} and {ATTRIBUTE_OPTION}NAME"
            )
        if name == "error" and not reads_return:
            raise TargetError(
                f"target {self.path}: error={where}: an episode reads its error from the "
                "return value (error=return or error=return.NAME)"
            )

    def _checked_settings(self) -> dict[str, Any]:
        known = SETTINGS.get(self.role, {})
        settings: dict[str, Any] = {}
        for name, value in dict(self.settings).items():
            if name not in known:
                raise TargetError(
                    f"target {self.path}: role {self.role} has no setting {name!r}"
                    + (f"; its settings: {', '.join(known)}" if known else "")
                )
            read = known[name][0]
            try:
                settings[name] = read(value)
            except (TypeError, ValueError) as exc:
                raise TargetError(f"target {self.path}: {name}={value!r}: {exc}") from None
        if self.role == LLMCallScope.role and "final_on" not in settings and settings:
            raise TargetError(
                f"target {self.path}: {', '.join(settings)}: these describe the episode's "
                "final turn; add final_on (the finish reason that ends the episode, e.g. "
                "final_on=length)"
            )
        return settings

    @property
    def module(self) -> str:
        return self.path.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.path.partition(":")[2]

    @property
    def attribute(self) -> str:
        return self.qualname.rpartition(".")[2]

    def __str__(self) -> str:
        options = [f"{k}={v}" for k, v in self.arguments.items()]
        for name, value in self.settings.items():
            if isinstance(value, tuple):
                value = "|".join(value)
            options.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
        if self.extractor is not None:
            extractor = self.extractor
            name = extractor if isinstance(extractor, str) else _callable_name(extractor)
            options.insert(0, f"extractor={name}")
        return f"{self.path}={self.role}" + (f"[{','.join(options)}]" if options else "")


# --- parsing ---------------------------------------------------------------------------------


def parse_target(text: str) -> Target:
    """One target from its text form ``module:name=role[key=value,...]``."""
    entry = text.strip()
    match = _ENTRY.match(entry)
    if match is None:
        raise TargetError(
            f"target {entry!r}: expected 'package.module:Class.method=role' with optional "
            "'[key=value,...]' (e.g. 'pkg.env:Env.step=env.step[extractor=gymnasium]')"
        )
    options: dict[str, str] = {}
    for part in (match["options"] or "").split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise TargetError(f"target {entry!r}: option {part.strip()!r} is not key=value")
        if key in options:
            raise TargetError(f"target {entry!r}: option {key!r} given twice")
        options[key] = value
    extractor = options.pop("extractor", None)
    known = SETTINGS.get(match["role"], {})
    settings = {name: options.pop(name) for name in list(options) if name in known}
    return Target(
        match["path"], match["role"], extractor=extractor, arguments=options, settings=settings
    )


def parse_targets(text: str) -> tuple[list[Target], list[TargetError]]:
    """Targets separated by ``;`` or new lines; bad entries come back as errors, in order."""
    targets: list[Target] = []
    errors: list[TargetError] = []
    for entry in re.split(r"[;\n]", text):
        if entry.strip():
            try:
                targets.append(parse_target(entry))
            except TargetError as exc:
                errors.append(exc)
    return targets, errors


def targets_from_value(value: Target | str | Mapping[str, Any]) -> list[Target]:
    """A Target, a text of one or more targets, or a file-style table, as Targets."""
    if isinstance(value, Target):
        return [value]
    if isinstance(value, str):
        targets, errors = parse_targets(value)
        if errors:
            raise errors[0]
        return targets
    if isinstance(value, Mapping):
        return [_target_from_table(value)]
    raise TargetError(f"a target must be a Target, a string or a table, got {type(value).__name__}")


def _target_from_table(table: Mapping[str, Any]) -> Target:
    unknown = sorted(set(table) - set(_FILE_KEYS))
    where = table.get("path", "?")
    if unknown:
        raise TargetError(
            f"target {where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"use {', '.join(_FILE_KEYS)}"
        )
    if "path" not in table or "role" not in table:
        raise TargetError(f"target {where}: a target table needs 'path' and 'role'")
    arguments = table.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise TargetError(f"target {where}: 'arguments' must be a table of field = argument")
    settings = table.get("settings") or {}
    if not isinstance(settings, Mapping):
        raise TargetError(f"target {where}: 'settings' must be a table of name = value")
    return Target(
        str(table["path"]),
        str(table["role"]),
        table.get("extractor"),
        dict(arguments),
        dict(settings),
    )


#: The largest targets file read; a bigger one is reported, not read (a list of targets is
#: a few kilobytes; this keeps a wrong path such as a data file or /dev/zero harmless).
TARGETS_FILE_MAX_BYTES = 16 * 1024 * 1024


def read_targets_file(path: str | Path) -> tuple[list[Target], list[TargetError]]:
    """Targets from a TOML (``.toml``) or JSON file; see the module docstring for the format.

    Never raises: a file that cannot be read or parsed (missing, not UTF-8, too large, nested
    too deeply, not valid TOML or JSON) is one error naming the file; a bad entry is one error
    naming the entry, and the file's other entries are returned.
    """
    file = Path(path)
    try:
        with file.open("rb") as stream:
            data_bytes = stream.read(TARGETS_FILE_MAX_BYTES + 1)
        if len(data_bytes) > TARGETS_FILE_MAX_BYTES:
            return [], [
                TargetError(
                    f"targets file {file}: larger than {TARGETS_FILE_MAX_BYTES // 2**20} MiB; "
                    "not read (is it the right file?)"
                )
            ]
        text = data_bytes.decode("utf-8")
    except OSError as exc:
        return [], [TargetError(f"targets file {file}: cannot be read: {exc}")]
    except UnicodeDecodeError as exc:
        return [], [TargetError(f"targets file {file}: cannot be read: not UTF-8 text ({exc})")]
    try:
        if file.suffix.lower() == ".toml":
            data: Any = _load_toml(text)
        else:
            data = json.loads(text)
    except TargetError as exc:
        return [], [exc]
    except RecursionError:
        return [], [
            TargetError(f"targets file {file}: not valid {_format_of(file)}: nested too deeply")
        ]
    except ValueError as exc:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        reason = " ".join(str(exc).split())
        return [], [TargetError(f"targets file {file}: not valid {_format_of(file)}: {reason}")]
    except Exception as exc:  # a parser's own failure: still this file's problem only
        return [], [
            TargetError(
                f"targets file {file}: not valid {_format_of(file)}: {type(exc).__name__}: {exc}"
            )
        ]
    entries = data.get("targets") if isinstance(data, Mapping) else data
    if not isinstance(entries, list):
        return [], [
            TargetError(f"targets file {file}: expected a list under 'targets' (see the docs)")
        ]
    targets: list[Target] = []
    errors: list[TargetError] = []
    for index, entry in enumerate(entries):
        try:
            if not isinstance(entry, (str, Mapping)):
                raise TargetError(f"entry {index}: expected a string or a table")
            targets.extend(targets_from_value(entry))
        except TargetError as exc:
            errors.append(TargetError(f"targets file {file}: {exc}"))
        except Exception as exc:  # (RecursionError on a deeply nested entry, say)
            errors.append(
                TargetError(f"targets file {file}: entry {index}: {type(exc).__name__}: {exc}")
            )
    return targets, errors


def _format_of(file: Path) -> str:
    return "TOML" if file.suffix.lower() == ".toml" else "JSON"


def _load_toml(text: str) -> Any:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise TargetError(
                "targets file: TOML needs Python 3.11+ (or the tomli package); use JSON"
            ) from None
    return tomllib.loads(text)


# --- resolving -------------------------------------------------------------------------------

#: How a traced attribute is called: does the first argument bind to an object or class?
FUNCTION, METHOD, STATICMETHOD, CLASSMETHOD = "function", "method", "staticmethod", "classmethod"


@dataclass(frozen=True)
class Site:
    """One attribute to patch: ``owner.<attribute>``, and what is there now."""

    owner: Any  # a module or a class
    attribute: str
    descriptor: Any  # the object found (function, staticmethod, classmethod, callable)
    own: bool  # defined in the owner's own namespace (False: inherited from a base class)
    binding: str  # FUNCTION, METHOD, STATICMETHOD or CLASSMETHOD

    @property
    def function(self) -> Callable[..., Any]:
        """The plain callable behind the descriptor (what gets traced)."""
        if self.binding in (STATICMETHOD, CLASSMETHOD):
            return self.descriptor.__func__
        return self.descriptor

    @property
    def receiver(self) -> bool:
        """True when the first argument is the bound object or class."""
        return self.binding in (METHOD, CLASSMETHOD)

    @property
    def label(self) -> str:
        owner = self.owner
        name = owner.__name__ if isinstance(owner, types.ModuleType) else _class_label(owner)
        return f"{name}.{self.attribute}"


@dataclass(frozen=True)
class Resolved:
    """A target and where it lives; ``site.owner`` is a class for methods."""

    target: Target
    site: Site
    ray_actor: Any = None  # the @ray.remote actor class the path went through, if any


def resolve(target: Target, module: types.ModuleType | None = None) -> Resolved:
    """Find the target's attribute in ``module``, else in its module imported by name;
    TargetError says what is wrong."""
    if module is not None:
        parent: Any = module
    else:
        try:
            parent = importlib.import_module(target.module)
        except Exception as exc:
            raise TargetError(
                f"target {target.path}: module {target.module!r} cannot be imported "
                f"({type(exc).__name__}: {exc})"
            ) from exc
    parts = target.qualname.split(".")
    walked = parent.__name__
    ray_actor = None
    for part in parts[:-1]:
        try:
            parent = getattr(parent, part)
        except AttributeError:
            raise TargetError(f"target {target.path}: {walked} has no attribute {part!r}") from None
        walked = f"{walked}.{part}"
        user_class = _unwrap_ray_actor(parent)
        if user_class is not parent:
            ray_actor, parent = parent, user_class
    if not isinstance(parent, (types.ModuleType, type)):
        raise TargetError(
            f"target {target.path}: {walked} is a {type(parent).__name__}, not a class or a "
            "module; name a function or a method of a class"
        )
    site = site_for(parent, parts[-1])
    if site is None:
        raise TargetError(f"target {target.path}: {walked} has no attribute {parts[-1]!r}")
    _check_traceable(target, site)
    return Resolved(target, site, ray_actor)


def site_for(owner: Any, attribute: str) -> Site | None:
    """The patch site of ``owner.<attribute>`` (looked up without binding), None if missing."""
    if isinstance(owner, type):
        for cls in owner.__mro__:
            if attribute in vars(cls):
                descriptor = vars(cls)[attribute]
                return Site(owner, attribute, descriptor, cls is owner, binding_of(descriptor))
        return None
    if attribute not in vars(owner):
        return None
    return Site(owner, attribute, vars(owner)[attribute], True, FUNCTION)


def overriding_subclasses(owner: type, attribute: str) -> list[type]:
    """Every subclass of ``owner`` (at any depth) that defines ``attribute`` itself."""
    found: list[type] = []
    seen: set[int] = set()
    pending = list(_subclasses(owner))
    while pending:
        cls = pending.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        if attribute in vars(cls):
            found.append(cls)
        pending.extend(_subclasses(cls))
    return found


def _subclasses(cls: type) -> list[type]:
    try:
        return list(type.__subclasses__(cls))
    except TypeError:
        return []


def binding_of(descriptor: Any) -> str:
    """How ``descriptor``, found in a class namespace, binds when called."""
    if isinstance(descriptor, staticmethod):
        return STATICMETHOD
    if isinstance(descriptor, classmethod):
        return CLASSMETHOD
    if inspect.isfunction(descriptor):
        return METHOD
    return FUNCTION  # another callable stored on the class: called as is, nothing bound


def _check_traceable(target: Target, site: Site) -> None:
    descriptor = site.descriptor
    if _is_ray_remote_function(descriptor):
        raise TargetError(
            f"target {target.path}: is a Ray remote function; target the plain function it "
            "runs (or a method of a @ray.remote class) instead"
        )
    if isinstance(descriptor, type) or _unwrap_ray_actor(descriptor) is not descriptor:
        raise TargetError(
            f"target {target.path}: is a class; name one of its methods (e.g. {target.path}.step)"
        )
    if not callable(site.function):
        raise TargetError(
            f"target {target.path}: is not callable (it is a {type(descriptor).__name__})"
        )
    if target.arguments:
        check_arguments(target, site)
    function = site.function
    returns = [f"{k}={v}" for k, v in target.arguments.items() if v.split(".")[0] == RETURN]
    if target.role == EPISODE_FIELDS and inspect.isasyncgenfunction(function):
        raise TargetError(
            f"target {target.path}: is an async generator, which returns no value; "
            f"{EPISODE_FIELDS} needs a function, coroutine function or generator"
        )
    if target.role == sc.EPISODE and returns and _is_generator(function):
        raise TargetError(
            f"target {target.path}: {', '.join(returns)}: an episode played by a generator "
            "has no return value agenttrace reads; name a function or coroutine function"
        )


def check_arguments(target: Target, site: Site) -> None:
    """Each argument option must name a parameter of the traced callable."""
    try:
        parameters = list(inspect.signature(site.function).parameters.values())
    except (TypeError, ValueError):
        return  # no signature to check against (some builtins)
    if site.receiver and parameters:
        parameters = parameters[1:]
    names = {p.name for p in parameters if p.kind is not p.VAR_KEYWORD}
    if site.receiver:
        names.add(RECEIVER_NAME)
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return  # any keyword may arrive through **kwargs
    for field_name, where in target.arguments.items():
        first = where.split(".")[0]
        if first not in names and first != RETURN:  # (a keyword: never a parameter's name)
            raise TargetError(
                f"target {target.path}: {field_name}={where}: the function has no argument "
                f"{first!r} (its arguments: {', '.join(sorted(names)) or 'none'})"
            )


def _is_generator(function: Any) -> bool:
    return inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)


def resolve_extractor(target: Target) -> Callable[[Any], Any] | str | None:
    """The target's extractor as a callable or built-in name; imports ``module:function``."""
    extractor = target.extractor
    if not isinstance(extractor, str) or extractor in EXTRACTORS:
        return extractor
    module_name, _, attribute = extractor.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise TargetError(
            f"target {target.path}: extractor {extractor!r} cannot be imported "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    if not callable(obj):
        raise TargetError(f"target {target.path}: extractor {extractor!r} is not callable")
    return obj


# --- Ray -------------------------------------------------------------------------------------


def _unwrap_ray_actor(obj: Any) -> Any:
    """The user's class behind a ``@ray.remote`` actor class; anything else unchanged."""
    actor = sys.modules.get("ray.actor")
    actor_class = getattr(actor, "ActorClass", None) if actor is not None else None
    if actor_class is None or not isinstance(obj, actor_class):
        return obj
    try:
        return obj.__ray_metadata__.modified_class.__ray_actor_class__
    except AttributeError:
        return obj


def _is_ray_remote_function(obj: Any) -> bool:
    module = sys.modules.get("ray.remote_function")
    remote = getattr(module, "RemoteFunction", None) if module is not None else None
    return remote is not None and isinstance(obj, remote)


def _class_label(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _callable_name(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}:{name}" if module else name

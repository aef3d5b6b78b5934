"""Zero-code instrumentation: trace named functions and methods as episodes, steps, LLM calls.

``AgentTraceInstrumentor`` is an OpenTelemetry ``BaseInstrumentor`` registered under the
``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument python train.py``
loads it; with ``AGENTTRACE_TARGETS`` (or ``AGENTTRACE_TARGETS_FILE``) set it wraps the named
functions and methods with wrapt and every call becomes an agenttrace span, exactly as if the
function had been decorated (``@at.episode``, ``@at.env_step``, ...): the wrappers call the
decorators' own per-call code (``scope.trace_callable``). In code::

    AgentTraceInstrumentor().instrument(targets=["pkg.env:Env.step=env.step"])
    ...
    AgentTraceInstrumentor().uninstrument()  # every original attribute back, same objects

Errors: targets given in code must all resolve or ``instrument`` raises ``TargetError`` naming
each bad one and patches nothing. Targets from the environment are read inside
``opentelemetry-instrument``, where raising would stop the user's program: each bad one is
logged as an error (naming it and why) and the others are instrumented.

Propagation: ``AGENTTRACE_PROPAGATE`` (or ``propagate=``) also has thread pools, httpx and
aiohttp carry episodes across threads and HTTP hops (agenttrace.instrument.propagate_patches).

Methods: the named class and every subclass that overrides the method (now, or later: an
``__init_subclass__`` hook patches classes defined after ``instrument()``) are traced. A call
made while a traced call of the same role and method name is in progress (an override calling
``super()``, a wrapper env calling the env it wraps) is not traced again.

Ray: a ``@ray.remote`` class is shipped to its actor processes by value (cloudpickle). The
wrappers on its methods pickle as "this function, traced as that target", so actors created
after ``instrument()`` run traced methods and write their own trajectories. Worker processes
can also instrument themselves: they inherit ``AGENTTRACE_TARGETS`` and, under
``opentelemetry-instrument``, its ``sitecustomize`` path; or give Ray the setup hook
:func:`instrument_from_environment` (docs/auto-instrumentation.md).

multiprocessing: a traced function pickles by reference, as the function does
(agenttrace.instrument.proxies). A spawn or forkserver worker under
``opentelemetry-instrument`` instruments itself; targets naming the script are bound in its
``__mp_main__`` once multiprocessing has run the script there (script.ParentScriptBinder).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
import threading
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry.instrumentation.environment_variables import (
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS,
)
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

# The two keys is_instrumentation_enabled() reads, read here in one context lookup per call.
from opentelemetry.instrumentation.utils import (
    _SUPPRESS_INSTRUMENTATION_KEY,
    _SUPPRESS_INSTRUMENTATION_KEY_PLAIN,
)

from agenttrace import config
from agenttrace.instrument import exit_warnings, propagate_patches, provider_watch, script
from agenttrace.instrument import targets as targets_module
from agenttrace.instrument.episode_fields import EpisodeFieldsScope, FieldsCall
from agenttrace.instrument.proxies import PatchProxy
from agenttrace.instrument.scope import CallHooks, _Scope, trace_callable
from agenttrace.instrument.target_scopes import template as _template
from agenttrace.instrument.targets import (
    Resolved,
    Site,
    Target,
    TargetError,
    overriding_subclasses,
    resolve,
    resolve_extractor,
    site_for,
)

logger = logging.getLogger("agenttrace")

#: The entry point name; ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` lists it to turn us off.
ENTRY_POINT_NAME = "agenttrace"

_ABSENT: Any = object()


# --- the per-call wrapper ---------------------------------------------------------------------


class _TargetCall:
    """The wrapt wrapper function of one patched attribute.

    Traces the call with the decorators' per-call code (:class:`CallHooks`, as
    ``@at.env_step`` and friends do), or passes it straight to the original when
    instrumentation is suppressed, when this patch was withdrawn, or when a call of the same
    role and name is already in progress in this context (so ``super().step()`` is traced
    once, not twice). Sync functions, the hot path of a training loop, are traced right here
    on the call wrapt already bound; other kinds go through the decorator-made function.
    """

    __slots__ = ("active", "called", "hooks", "mark", "receiver", "traced")

    def __init__(self, template: _Scope, function: Callable[..., Any], receiver: bool) -> None:
        self.receiver = receiver
        self.mark = template._context_mark or ""
        self.active = True
        self.called = False  # for the at-exit report of targets never called
        if _is_plain_sync(function):
            self.hooks: CallHooks | None = CallHooks(template, function, receiver=receiver)
            self.traced: Callable[..., Any] | None = None
        else:
            self.hooks = None
            self.traced = trace_callable(template, function, receiver=receiver)

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        self.called = True
        current = otel_context.get_current()  # one lookup for the three checks
        if (
            not self.active
            or current.get(self.mark) is not None
            or current.get(_SUPPRESS_INSTRUMENTATION_KEY)
            or current.get(_SUPPRESS_INSTRUMENTATION_KEY_PLAIN)
        ):
            return wrapped(*args, **kwargs)
        hooks = self.hooks
        if hooks is None:
            if self.receiver and instance is not None:
                return self.traced(instance, *args, **kwargs)  # type: ignore[misc]
            return self.traced(*args, **kwargs)  # type: ignore[misc]
        if self.receiver and instance is not None:  # obj.step(a): wrapt split it off
            scope = hooks.begin_bound(instance, args, kwargs)
        else:  # a function, or Class.step(obj, a)
            scope = hooks.begin(args, kwargs)
        return hooks.run(scope, wrapped, args, kwargs)


def _is_plain_sync(function: Callable[..., Any]) -> bool:
    return not (
        inspect.iscoroutinefunction(function)
        or inspect.isgeneratorfunction(function)
        or inspect.isasyncgenfunction(function)
    )


class TracedFunction(PatchProxy):
    """A traced module-level function (or other attribute that is not a class method).

    Pickles and copies as the function it wraps (:class:`~agenttrace.instrument.proxies.
    PatchProxy`): by reference, so the receiving process gets whatever that name is there,
    traced if that process instrumented it.
    """

    def __init__(self, wrapped: Any, call: _TargetCall, target: Target) -> None:
        super().__init__(wrapped, call)
        self._self_call = call
        self._self_target = target

    @property
    def agenttrace_target(self) -> Target:
        return self._self_target

    @property
    def agenttrace_call(self) -> _TargetCall:
        return self._self_call

    def _reduce_unreachable(self, protocol: Any) -> Any:
        """The function's own name does not lead to it (defined in another function, or
        re-exported under another name): the target's name, when it leads to this wrapper."""
        target = self._self_target
        try:
            if _import_attribute(target.module, target.qualname) is self:
                return (_import_attribute, (target.module, target.qualname))
        except Exception:
            pass
        return super()._reduce_unreachable(protocol)


class TracedMethod(TracedFunction):
    """A traced attribute of a class (function, staticmethod or classmethod).

    Classes pickled by value (cloudpickle: Ray actor classes, classes of ``__main__``) carry
    it as "this function, traced as this target", rebuilt on the other side. For that its
    ``__class__`` is itself where the wrapped object is a plain function: cloudpickle would
    otherwise pickle it as the bare function and drop the tracing. Bound (``obj.method``)
    it looks like the method as usual.
    """

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        wrapped_class = type(self.__wrapped__)
        return type(self) if issubclass(wrapped_class, types.FunctionType) else wrapped_class

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_rebuild_method, (self._self_target, self.__wrapped__))


def _import_attribute(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rebuild_method(target: Target, descriptor: Any) -> Any:
    """Unpickling a traced method in another process: trace it there too, never fail."""
    if isinstance(descriptor, TracedFunction):
        return descriptor
    try:
        binding = targets_module.binding_of(descriptor)
        return _make_wrapper(target, descriptor, binding, TracedMethod, _template(target, None))
    except Exception:
        logger.exception(
            "agenttrace: could not trace %s in process %d; it runs untraced", target, os.getpid()
        )
        return descriptor


def _make_wrapper(
    target: Target, descriptor: Any, binding: str, kind: type[TracedFunction], template: _Scope
) -> TracedFunction:
    """A wrapt wrapper around ``descriptor`` whose calls run the decorator's traced code."""
    site = Site(None, target.attribute, descriptor, True, binding)
    make = FieldsCall if isinstance(template, EpisodeFieldsScope) else _TargetCall
    return kind(descriptor, make(template, site.function, site.receiver), target)  # type: ignore[arg-type]


# --- patching --------------------------------------------------------------------------------


@dataclass
class _Patch:
    """One attribute we set, and what to put back."""

    owner: Any
    attribute: str
    previous: Any  # the owner's own value before, or _ABSENT when it had none
    installed: Any
    label: str
    call: _TargetCall | None = None  # None for __init_subclass__ hooks
    target: Target | None = None  # as the user wrote it (a script's targets are rebound)
    remote: bool = False  # a Ray actor's method: called in actor processes, not here

    def restore(self) -> bool:
        """Put the previous value back; False when someone replaced ours meanwhile."""
        if vars(self.owner).get(self.attribute, _ABSENT) is not self.installed:
            return False
        if self.previous is _ABSENT:
            delattr(self.owner, self.attribute)
        else:
            setattr(self.owner, self.attribute, self.previous)
        return True


class _Patcher:
    """Applies resolved targets and remembers every change, in order, to undo it."""

    def __init__(self, tracer_provider: Any) -> None:
        self.tracer_provider = tracer_provider
        self.patches: list[_Patch] = []
        self.hooks: dict[int, _SubclassHook] = {}
        self.lock = threading.RLock()
        self.active = True

    def apply(self, resolved: Resolved, sites: list[Site], shown: Target | None = None) -> None:
        """Patch every site of a resolved target; ``shown`` is the target as the user wrote
        it, when it differs (a script's target, bound in ``__main__``)."""
        target = resolved.target
        if _already_sent_to_ray(resolved.ray_actor):
            logger.warning(
                "agenttrace: %s: the Ray actor class was already sent to this Ray session's "
                "workers; actors created from it there stay untraced (instrument before its "
                "first .remote())",
                target.path,
            )
        template = _template(target, self.tracer_provider)
        shown = shown or target
        remote = resolved.ray_actor is not None
        for site in sites:
            self._patch_site(target, site, template, shown, remote)
        owner = resolved.site.owner
        if isinstance(owner, type):
            self._hook_subclasses(target, owner, template, shown, remote)

    def _patch_site(
        self, target: Target, site: Site, template: _Scope, shown: Target, remote: bool
    ) -> None:
        kind = TracedMethod if isinstance(site.owner, type) else TracedFunction
        wrapper = _make_wrapper(target, site.descriptor, site.binding, kind, template)
        previous = site.descriptor if site.own else _ABSENT
        setattr(site.owner, site.attribute, wrapper)
        patch = _Patch(site.owner, site.attribute, previous, wrapper, site.label)
        patch.call, patch.target, patch.remote = wrapper._self_call, shown, remote
        with self.lock:
            self.patches.append(patch)

    def uncalled(self) -> list[Target]:
        """Targets patched here none of whose sites was ever called (in this process)."""
        called: dict[str, bool] = {}
        shown: dict[str, Target] = {}
        with self.lock:
            for patch in self.patches:
                if patch.call is None or patch.target is None or patch.remote:
                    continue
                key = str(patch.target)
                shown[key] = patch.target
                called[key] = called.get(key, False) or patch.call.called
        return [shown[key] for key, was_called in called.items() if not was_called]

    def _hook_subclasses(
        self, target: Target, owner: type, template: _Scope, shown: Target, remote: bool
    ) -> None:
        """Patch classes defined later that override the method, as they are created."""
        hook = self.hooks.get(id(owner))
        if hook is None:
            previous = vars(owner).get("__init_subclass__", _ABSENT)
            hook = _SubclassHook(owner, previous, self)
            installed = classmethod(hook)
            setattr(owner, "__init_subclass__", installed)  # noqa: B010 - a dunder on purpose
            self.hooks[id(owner)] = hook
            with self.lock:
                label = f"{owner.__module__}.{owner.__qualname__}.__init_subclass__"
                self.patches.append(_Patch(owner, "__init_subclass__", previous, installed, label))
        hook.targets.append((target, template, shown, remote))

    def undo(self, since: int = 0) -> None:
        """Restore what was patched, newest first; ``since`` keeps the first patches."""
        with self.lock:
            if since == 0:
                self.active = False
            patches, self.patches = self.patches[since:], self.patches[:since]
        for patch in reversed(patches):
            if patch.call is not None:
                patch.call.active = False  # even if it cannot be removed, it stops tracing
            else:
                self.hooks.pop(id(patch.owner), None)
            try:
                restored = patch.restore()
            except Exception:
                logger.exception("agenttrace: could not restore %s", patch.label)
                continue
            if not restored:
                logger.warning(
                    "agenttrace: %s was replaced after it was instrumented; left as is "
                    "(the agenttrace wrapper inside it no longer traces)",
                    patch.label,
                )


def _already_sent_to_ray(actor_class: Any) -> bool:
    metadata = getattr(actor_class, "__ray_metadata__", None)
    return getattr(metadata, "last_export_cluster_and_job", None) is not None


class _SubclassHook:
    """``__init_subclass__`` of a class with traced methods: runs the class's previous hook
    (or the base classes'), then traces the new subclass's overrides of those methods.

    It pickles without the patcher (a class pickled by value, e.g. a Ray actor class, carries
    only the chaining part: the receiving process traces what it instrumented itself). It has
    slots, not a ``__dict__``, so tools that walk class namespaces (``dis.dis``, which Ray runs
    on actor classes) do not recurse from it back into the class.
    """

    __slots__ = ("owner", "patcher", "previous", "targets")

    def __init__(self, owner: type, previous: Any, patcher: _Patcher | None = None) -> None:
        self.owner = owner
        self.previous = previous
        self.patcher = patcher
        self.targets: list[tuple[Target, _Scope, Target, bool]] = []

    def __call__(self, cls: type, **kwargs: Any) -> None:
        previous = self.previous
        if previous is _ABSENT:
            super(self.owner, cls).__init_subclass__(**kwargs)
        elif isinstance(previous, (classmethod, staticmethod)):
            previous.__get__(None, cls)(**kwargs)
        else:
            previous(cls, **kwargs)
        patcher = self.patcher
        if patcher is None or not patcher.active:
            return
        for target, template, shown, remote in self.targets:
            if target.attribute not in vars(cls):
                continue
            try:
                site = site_for(cls, target.attribute)
                if site is not None and not isinstance(site.descriptor, TracedFunction):
                    patcher._patch_site(target, site, template, shown, remote)
            except Exception:
                logger.exception(
                    "agenttrace: could not trace %s.%s", cls.__qualname__, target.attribute
                )

    def __reduce__(self) -> Any:
        absent = self.previous is _ABSENT
        return (_chaining_hook, (self.owner, absent, None if absent else self.previous))


def _chaining_hook(owner: type, absent: bool, previous: Any) -> _SubclassHook:
    """A hook rebuilt from a pickle: it only chains to the previous hook."""
    return _SubclassHook(owner, _ABSENT if absent else previous)


def _plan(
    targets: list[Target], module: types.ModuleType | None = None
) -> tuple[list[tuple[Resolved, list[Site]]], list[TargetError]]:
    """Resolve every target (in ``module`` when given, else in its module imported by name)
    and list its patch sites; each site belongs to one target."""
    plan: list[tuple[Resolved, list[Site]]] = []
    errors: list[TargetError] = []
    claimed: dict[tuple[int, str], Target] = {}
    for target in targets:
        try:
            resolved = resolve(target, module)
            resolve_extractor(target)
            sites = [resolved.site]
            owner = resolved.site.owner
            if isinstance(owner, type):
                for cls in overriding_subclasses(owner, target.attribute):
                    site = site_for(cls, target.attribute)
                    if site is not None:
                        sites.append(site)
            for site in sites:
                if isinstance(site.descriptor, TracedFunction):
                    raise TargetError(
                        f"target {target.path}: {site.label} is already traced (by "
                        f"{site.descriptor.agenttrace_target}); uninstrument first"
                    )
                key = (id(site.owner), site.attribute)
                other = claimed.get(key)
                if other is not None:
                    raise TargetError(
                        f"target {target.path}: {site.label} is also covered by target "
                        f"{other.path} (a method's targets cover its overrides); keep one"
                    )
            for site in sites:
                claimed[(id(site.owner), site.attribute)] = target
            plan.append((resolved, sites))
        except TargetError as exc:
            errors.append(exc)
    return plan, errors


# --- the instrumentor ------------------------------------------------------------------------


class AgentTraceInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Trace named functions and methods as agenttrace episodes, steps and LLM calls.

    ``instrument(targets=[...], tracer_provider=None)``: targets are strings in the
    ``AGENTTRACE_TARGETS`` syntax or :class:`~agenttrace.instrument.targets.Target` objects;
    without ``targets`` they come from ``AGENTTRACE_TARGETS_FILE`` and ``AGENTTRACE_TARGETS``.
    ``propagate=["threads", "httpx", "aiohttp"]`` (default: ``AGENTTRACE_PROPAGATE``) also
    patches those libraries to carry episodes across threads and HTTP
    (:mod:`agenttrace.instrument.propagate_patches`). ``uninstrument()`` puts every original
    attribute back.
    """

    _patcher: _Patcher | None = None
    _propagation: propagate_patches.Propagation | None = None
    _binder: script.ScriptBinder | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()  # traces the user's own code; no library to check for

    def _instrument(self, **kwargs: Any) -> None:
        given = kwargs.get("targets")
        if disabled_by_environment():
            logger.log(
                logging.WARNING if given is not None else logging.INFO,
                "agenttrace: instrumentation off (%s lists %s)",
                OTEL_PYTHON_DISABLED_INSTRUMENTATIONS,
                ENTRY_POINT_NAME,
            )
            return
        patcher = _Patcher(kwargs.get("tracer_provider"))
        propagate = propagate_patches.requested(kwargs.get("propagate"))  # bad in code: raises
        if given is not None:
            targets, errors = _targets_from_code(given)
        else:
            targets, errors = targets_from_environment()
        running = script.running_script()
        waiting, never = _script_targets(running, [t for t in targets if running.names_it(t)])
        others = [t for t in targets if not running.names_it(t)]
        # A spawn or forkserver child: the parent's script runs here later, as __mp_main__;
        # a module not imported yet may be that script (imported by name, it would run twice).
        child = given is None and script.in_multiprocessing_child()
        # (targets in code must be right now: they raise below, as every mistake in code)
        later = [
            t
            for t in others
            if given is None
            and ((child and t.module not in sys.modules) or _not_importable_yet(t.module))
        ]
        plan, plan_errors = _plan([t for t in others if t not in later])
        errors += never + plan_errors
        if given is not None and errors:
            raise TargetError(
                "agenttrace: nothing instrumented; " + "; ".join(str(e) for e in errors)
            )
        for error in errors:
            logger.error("agenttrace: %s; not instrumented (the other targets are)", error)
        for resolved, sites in plan:
            done = len(patcher.patches)
            try:
                patcher.apply(resolved, sites)
            except Exception:
                if given is not None:
                    patcher.undo()
                    raise
                patcher.undo(since=done)  # this target only; the others stay
                logger.exception("agenttrace: instrumenting %s failed", resolved.target)
        self._patcher = patcher
        self._propagation = propagate_patches.apply(propagate)
        if given is None and config.read_setting_or("gymnasium", False):
            _instrument_gymnasium_on_import()
        for target in later:
            _wait_for_import(self, patcher, target)
        if child and (waiting or later):
            bind = functools.partial(_bind_in_parent_script, self, patcher)
            self._binder = script.ParentScriptBinder(waiting + later, bind)
            self._binder.start()
        elif waiting:
            self._binder = script.ScriptBinder(
                waiting, functools.partial(_bind_in_script, patcher), _report_never_defined
            )
            self._binder.start()
        _report_uncalled_at_exit(self)
        if given is None:  # (AGENTTRACE_CONVENTIONS: the program's own spans, no targets)
            provider_watch.read_own_tracer_spans()
        if plan:
            logger.debug("agenttrace: instrumented %s", "; ".join(str(r.target) for r, _ in plan))

    def _uninstrument(self, **kwargs: Any) -> None:
        _waiting_for_import.pop(id(self), None)  # (their hooks see the patcher is gone)
        binder, self._binder = self._binder, None
        if binder is not None:
            binder.stop()
        patcher, self._patcher = self._patcher, None
        if patcher is not None:
            patcher.undo()
        propagation, self._propagation = self._propagation, None
        if propagation is not None:
            propagation.undo()

    @property
    def instrumented_targets(self) -> list[str]:
        """The attributes currently patched, as ``module.Class.attribute`` labels."""
        patcher = self._patcher
        if patcher is None:
            return []
        with patcher.lock:
            return [p.label for p in patcher.patches if p.call is not None]


def _targets_from_code(given: Any) -> tuple[list[Target], list[TargetError]]:
    if isinstance(given, (str, Target, Mapping)):
        given = [given]
    if not isinstance(given, Iterable):
        raise TargetError(f"targets must be a list of strings or Targets, got {given!r}")
    found: list[Target] = []
    errors: list[TargetError] = []
    for value in given:
        try:
            found.extend(targets_module.targets_from_value(value))
        except TargetError as exc:
            errors.append(exc)
    return found, errors


def _script_targets(
    running: script.Script, targets: list[Target]
) -> tuple[list[Target], list[TargetError]]:
    """The script's targets to wait for, and those its source shows it never defines."""
    source = script.read_source(running.path)
    waiting: list[Target] = []
    never: list[TargetError] = []
    for target in targets:
        why = script.why_never_defined(target, source, running.describe()) if source else None
        if why is None:
            waiting.append(target)
        else:
            never.append(TargetError(f"target {target} can never take effect: {why}"))
    return waiting, never


def _bind_in_script(patcher: _Patcher, target: Target, main: types.ModuleType) -> None:
    """Patch a script's target in ``__main__`` now that the script defined its name.

    It is patched as ``__main__:<name>`` (what pickling by reference must name; importing the
    script's file name would run it again) and reported as the user wrote it.
    """
    try:
        bound = dataclasses.replace(target, path=f"{script.MAIN}:{target.qualname}")
        plan, errors = _plan([bound], main)
        for error in errors:
            reason = str(error).split(": ", 1)[-1]
            _report_never_defined(target, reason)
        for resolved, sites in plan:
            if patcher.active:
                patcher.apply(resolved, sites, shown=target)
    except Exception:
        logger.exception("agenttrace: instrumenting %s failed", target)


def _bind_in_parent_script(
    instrumentor: AgentTraceInstrumentor, patcher: _Patcher, target: Target, main: Any
) -> None:
    """A multiprocessing child ran its parent's script as ``__mp_main__``: ``target`` names
    that script, so it is patched there (and no longer waits for its module's import)."""
    _waiting_for_import.get(id(instrumentor), {}).pop(target.path, None)
    if instrumentor._patcher is not patcher:
        return
    name = target.qualname
    original = vars(main).get(name)
    _bind_in_script(patcher, target, main)
    # multiprocessing ran the script in a namespace of its own and copied it into the
    # module: the script's functions look names up in that namespace (their globals), so a
    # function target is put there too, for the calls the script makes to it.
    traced = vars(main).get(name)
    namespace = getattr(original, "__globals__", None)
    if (
        isinstance(traced, TracedFunction)
        and isinstance(namespace, dict)
        and namespace is not vars(main)
        and namespace.get(name) is original
    ):
        namespace[name] = traced


# --- targets whose module is imported later ---------------------------------------------------


def _not_importable_yet(module: str) -> bool:
    """Whether ``module`` cannot be found now (not: found but failing to import, which
    resolve reports). Launchers and plugin loaders often put code on sys.path at run time."""
    if module in sys.modules:
        return False
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is missing too
        return True
    except Exception:
        return False


def _wait_for_import(
    instrumentor: AgentTraceInstrumentor, patcher: _Patcher, target: Target
) -> None:
    """Instrument ``target`` when its module is first imported (a post-import hook)."""
    waiting = _waiting_for_import.setdefault(id(instrumentor), {})
    waiting[target.path] = target
    logger.debug("agenttrace: %s waits for %s to be imported", target, target.module)

    def imported(module: types.ModuleType) -> None:
        if waiting.pop(target.path, None) is None or instrumentor._patcher is not patcher:
            return  # uninstrumented meanwhile, or already done
        plan, errors = _plan([target], module)
        for error in errors:
            logger.error("agenttrace: %s; not instrumented (the other targets are)", error)
        for resolved, sites in plan:
            try:
                patcher.apply(resolved, sites)
            except Exception:
                logger.exception("agenttrace: instrumenting %s failed", resolved.target)

    wrapt.register_post_import_hook(imported, target.module)


#: Targets whose module was not imported yet, by instrumentor: path -> target.
_waiting_for_import: dict[int, dict[str, Target]] = {}


def _report_never_defined(target: Target, why: str) -> None:
    logger.error("agenttrace: target %s can never take effect: %s", target, why)


_exit_report_registered = False


def _report_uncalled_at_exit(instrumentor: AgentTraceInstrumentor) -> None:
    """At exit, one warning line naming the targets never called (once per process)."""
    global _exit_report_registered
    if not _exit_report_registered:
        _exit_report_registered = True
        atexit.register(_warn_uncalled, instrumentor)


def _instrument_gymnasium_on_import() -> None:
    """``AGENTTRACE_GYMNASIUM``: instrument gymnasium once it is imported (now if it is)."""

    def instrument(module: types.ModuleType) -> None:
        try:
            from agenttrace.instrument.wrappers import instrument_gymnasium

            instrument_gymnasium()
        except Exception:
            logger.exception("agenttrace: AGENTTRACE_GYMNASIUM: instrumenting gymnasium failed")

    wrapt.register_post_import_hook(instrument, "gymnasium")


def _warn_uncalled(instrumentor: AgentTraceInstrumentor) -> None:
    """What runs at exit: the targets never called and what else lost data quietly."""
    patcher = instrumentor._patcher
    if patcher is None or script.in_multiprocessing_child():
        return  # (a worker's own report, as forked workers, which end with os._exit, give none)
    never = _waiting_for_import.pop(id(instrumentor), {})
    exit_warnings.warn(patcher.uncalled, list(never.values()), _disabled_names())


def targets_from_environment(
    environ: Mapping[str, str] | None = None,
) -> tuple[list[Target], list[TargetError]]:
    """Targets from ``AGENTTRACE_TARGETS_FILE`` then ``AGENTTRACE_TARGETS``, with the errors.

    Never raises: each source is read on its own, so a broken file (unreadable, bad TOML or
    JSON, nested too deeply) is one error and the targets of ``AGENTTRACE_TARGETS`` are
    still returned, and the other way round.
    """
    found: list[Target] = []
    errors: list[TargetError] = []
    path = config.read_setting("targets_file", environ)
    if path:
        try:
            more, bad = targets_module.read_targets_file(path)
        except Exception as exc:  # (it never raises; if it did, only the file would be lost)
            more, bad = [], [TargetError(f"targets file {path}: {type(exc).__name__}: {exc}")]
        found += more
        errors += bad
    text = config.read_setting("targets", environ)
    if text:
        try:
            more, bad = targets_module.parse_targets(text)
        except Exception as exc:
            more, bad = [], [TargetError(f"{type(exc).__name__}: {exc}")]
        found += more
        errors += [TargetError(f"AGENTTRACE_TARGETS: {e}") for e in bad]
    return found, errors


def disabled_by_environment(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` lists ``agenttrace`` (or ``*``).

    opentelemetry-instrument then never loads the instrumentor; direct use honours it too.
    """
    names = _disabled_names(environ)
    return ENTRY_POINT_NAME in names or "*" in names


def _disabled_names(environ: Mapping[str, str] | None = None) -> set[str]:
    """The instrumentations ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` lists."""
    environ = os.environ if environ is None else environ
    return {n.strip() for n in environ.get(OTEL_PYTHON_DISABLED_INSTRUMENTATIONS, "").split(",")}


def instrument_from_environment() -> None:
    """Instrument this process from ``AGENTTRACE_TARGETS`` (and ``AGENTTRACE_PROPAGATE``);
    never raises.

    For processes that do not start through ``opentelemetry-instrument``, e.g. Ray workers:
    ``ray.init(runtime_env={"worker_process_setup_hook":
    "agenttrace.instrument.auto.instrument_from_environment"})``.
    """
    instrumentor = AgentTraceInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        return
    try:
        instrumentor.instrument(skip_dep_check=True)
    except Exception:
        logger.exception("agenttrace: instrumenting process %d failed", os.getpid())

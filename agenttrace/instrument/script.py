"""Targets that name the script being run: traced as the script defines them.

``opentelemetry-instrument python train.py`` instruments before ``train.py`` runs, so a target
``train:Runner.play_episode`` (the script's file name as its module) or
``__main__:Runner.play_episode`` names code that does not exist yet. Importing ``train`` to
find it would run the script a second time and trace a copy the script never uses. Instead,
such targets wait: while the script's top-level code runs, a line tracer on that one frame
binds each target as soon as the name it starts with is defined (right after the ``class`` or
``def`` statement, before the next line uses it), and goes away once every target is bound.

Before that, the script's source is read (never run) to find targets that can never take
effect: a name the script does not define. Those are reported at once, naming the target and
what the script does define, and are not waited for.

In a worker that multiprocessing starts with ``spawn`` or ``forkserver`` (a fresh interpreter,
instrumented by ``opentelemetry-instrument``'s ``sitecustomize`` before multiprocessing runs
anything), the parent's script is run later by multiprocessing, as ``__mp_main__``:
:class:`ParentScriptBinder` binds the targets that name it there, once it has run.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import logging
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttrace.instrument.targets import Target

MAIN = "__main__"

logger = logging.getLogger("agenttrace")


@dataclass(frozen=True)
class Script:
    """The program being run: the module names that mean it, and its source file."""

    names: frozenset[str]
    path: Path | None

    def names_it(self, target: Target) -> bool:
        return target.module in self.names

    def describe(self) -> str:
        return self.path.name if self.path is not None else "the script"


def running_script(argv: list[str] | None = None) -> Script:
    """What ``python FILE`` or ``python -m MODULE`` is running (``__main__`` in any case)."""
    if argv is None:
        argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    names = {MAIN}
    path: Path | None = None
    arguments = argv[1:]
    while arguments:  # skip interpreter options such as -u, -X dev, -W error
        first = arguments[0]
        if first == "-m" and len(arguments) > 1:
            names.add(arguments[1])
            path = _module_origin(arguments[1])
            break
        if first in ("-c", "-"):
            break
        if first in ("-X", "-W", "-Q"):
            arguments = arguments[2:]
            continue
        if first.startswith("-"):
            arguments = arguments[1:]
            continue
        path = Path(first)
        if path.is_dir():  # python folder/ runs folder/__main__.py
            path = path / "__main__.py"
        else:
            names.add(path.stem if path.suffix == ".py" else path.name)
        break
    return Script(frozenset(names), path)


def _module_origin(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    origin = getattr(spec, "origin", None)
    if spec is not None and spec.submodule_search_locations and origin:
        origin = str(Path(origin).with_name("__main__.py"))  # python -m package
    return Path(origin) if origin else None


# --- what the source defines ----------------------------------------------------------------


class _Namespace:
    """Names a module or class body defines, read from its syntax tree without running it."""

    def __init__(self, body: list[ast.stmt], open_ended: bool) -> None:
        self.names: dict[str, ast.ClassDef | None] = {}
        # True when the namespace may hold names the tree does not show: a class with base
        # classes (inherited methods), or a module that star-imports.
        self.open_ended = open_ended
        self._collect(body)

    def _collect(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                self.names[node.name] = node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.names[node.name] = None
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        self.open_ended = True
                    else:
                        self.names[(alias.asname or alias.name).split(".")[0]] = None
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.names[name.id] = None
            else:  # if/try/with/for blocks at this level define names too
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        self._collect([n for n in inner if isinstance(n, ast.stmt)])
                        for handler in inner:
                            if isinstance(handler, (ast.ExceptHandler, ast.match_case)):
                                self._collect(handler.body)


def why_never_defined(target: Target, source: str, script_name: str) -> str | None:
    """Why ``target`` can never be defined by a script with this source, or None if it may."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    namespace = _Namespace(tree.body, open_ended=False)
    walked = script_name
    for part in target.qualname.split("."):
        if part not in namespace.names:
            if namespace.open_ended:
                return None
            close = difflib.get_close_matches(part, namespace.names, n=3, cutoff=0.6)
            hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            return f"{walked} defines no {part!r}{hint}"
        node = namespace.names[part]
        walked = f"{walked}: {part}" if walked == script_name else f"{walked}.{part}"
        if node is None:
            return None  # a function, import or assignment: what it holds is not known here
        namespace = _Namespace(node.body, open_ended=bool(node.bases or node.keywords))
    return None


def read_source(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


# --- binding as the script runs -------------------------------------------------------------

Bind = Callable[[Target, types.ModuleType], None]
Report = Callable[[Target, str], None]


class ScriptBinder:
    """Binds targets in the ``__main__`` module as its top-level code defines them.

    ``bind(target, module)`` patches one target (its errors are its own to report);
    ``never(target, why)`` is called for targets still unbound when the script's top-level
    code ends. Only the script's own top-level frame is traced line by line; until that
    frame starts, a trace function looks at each new frame once to find it. The tracing
    stops as soon as no target is left.
    """

    def __init__(self, pending: list[Target], bind: Bind, never: Report) -> None:
        self._pending = list(pending)
        self._bind = bind
        self._never = never
        self._previous: Any = None
        self._tracing = False

    @property
    def pending(self) -> list[Target]:
        return list(self._pending)

    def start(self) -> None:
        main = sys.modules.get(MAIN)
        if main is None or not self._pending:
            return
        self._bind_defined(main)
        if not self._pending:
            return
        self._previous = sys.gettrace()
        self._tracing = True
        # Before the script starts (opentelemetry-instrument's sitecustomize), _on_call finds
        # its frame; called from the running script, that frame is traced from here on.
        frame = _main_frame(main)
        if frame is not None:
            frame.f_trace = self._on_line
        sys.settrace(self._on_call)

    def stop(self) -> None:
        if self._tracing:
            self._tracing = False
            sys.settrace(self._previous)
            main = sys.modules.get(MAIN)
            frame = _main_frame(main) if main is not None else None
            if frame is not None and frame.f_trace == self._on_line:
                frame.f_trace = None

    def _on_call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        previous = self._previous
        local = previous(frame, event, arg) if previous is not None else None
        if event == "call" and frame.f_code.co_name == "<module>":
            main = sys.modules.get(MAIN)
            if main is not None and frame.f_globals is vars(main):
                return self._on_line
        return local

    def _on_line(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        main = sys.modules.get(MAIN)
        if main is None or frame.f_globals is not vars(main):
            return None
        self._bind_defined(main)
        if event == "return":
            for target in self._pending:
                self._never(target, "the script's top-level code ended without defining it")
            self._pending = []
        if not self._pending:
            self.stop()
            return None
        return self._on_line

    def _bind_defined(self, main: types.ModuleType) -> None:
        namespace = vars(main)
        ready = [t for t in self._pending if t.qualname.split(".")[0] in namespace]
        if not ready:
            return
        self._pending = [t for t in self._pending if t not in ready]
        for target in ready:
            self._bind(target, main)


def _main_frame(main: types.ModuleType) -> types.FrameType | None:
    """The running top-level frame of ``__main__`` on this thread's stack, if any."""
    frame: types.FrameType | None = sys._getframe(1)
    namespace = vars(main)
    while frame is not None:
        if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


# --- the parent's script in a multiprocessing child ------------------------------------------

#: How multiprocessing starts a fresh interpreter: a spawn worker, the forkserver (whose
#: workers are its forks) and the resource tracker (which runs no user code).
_CHILD_COMMANDS = (
    "from multiprocessing.spawn import spawn_main",
    "from multiprocessing.forkserver import main",
    "from multiprocessing.resource_tracker import main",
)
_MP_MAIN = "__mp_main__"


def in_multiprocessing_child(argv: list[str] | None = None) -> bool:
    """Whether multiprocessing started this process as a fresh interpreter (``python -c
    'from multiprocessing.spawn import spawn_main; ...'``): a spawn worker, the forkserver or
    a worker forked from it, where the parent's script runs later as ``__mp_main__``, or the
    resource tracker those start methods use."""
    if argv is None:
        argv = list(getattr(sys, "orig_argv", None) or ())
    i = 1
    while i < len(argv):  # interpreter options first (-B, -s, -X dev, -W error, ...)
        argument = argv[i]
        if argument == "-c":
            return i + 1 < len(argv) and argv[i + 1].startswith(_CHILD_COMMANDS)
        if not argument.startswith("-") or argument in ("-", "-m"):
            return False  # a script, a module or stdin: not multiprocessing's command
        i += 2 if argument in ("-X", "-W") else 1
    return False


class ParentScriptBinder:
    """In a spawn or forkserver child: binds the targets that name the parent's script once
    multiprocessing has run it here as ``__mp_main__`` (before the child unpickles its work).

    multiprocessing runs the script by its path (``python train.py``) or module name
    (``python -m pkg.train``) in ``spawn._fixup_main_from_path`` / ``_fixup_main_from_name``;
    both are wrapped until that happened. ``bind(target, module)`` patches one target in the
    script's module; targets that do not name the script are left to the caller.
    """

    def __init__(self, pending: list[Target], bind: Bind) -> None:
        self._pending = list(pending)
        self._bind = bind
        self._patches: list[tuple[Any, str, Any, Any]] = []

    @property
    def pending(self) -> list[Target]:
        return list(self._pending)

    def start(self) -> None:
        import multiprocessing.spawn as spawn

        from agenttrace.instrument.proxies import PatchProxy

        for name, names_of in (
            ("_fixup_main_from_path", _names_of_path),
            ("_fixup_main_from_name", lambda module: {module}),
        ):
            original = getattr(spawn, name, None)
            if callable(original) and not isinstance(original, PatchProxy):
                proxy = PatchProxy(original, functools.partial(self._after_run, names_of))
                setattr(spawn, name, proxy)
                self._patches.append((spawn, name, original, proxy))

    def stop(self) -> None:
        patches, self._patches = self._patches, []
        for module, name, original, proxy in patches:
            if vars(module).get(name) is proxy:
                setattr(module, name, original)

    def _after_run(
        self,
        names_of: Callable[[str], set[str]],
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        result = wrapped(*args, **kwargs)
        main = sys.modules.get(_MP_MAIN)
        if main is None or not args or not isinstance(args[0], str):
            return result  # (nothing run here: this process already has its main module)
        try:
            names = names_of(args[0]) | {MAIN, _MP_MAIN}
            ready = [t for t in self._pending if t.module in names]
            self._pending = [t for t in self._pending if t not in ready]
            self.stop()
            for target in ready:
                self._bind(target, main)  # (reports its own failures)
        except Exception:
            logger.exception("agenttrace: binding targets in the parent's script failed")
        return result


def _names_of_path(path: str) -> set[str]:
    """The module name ``python PATH`` gives its script (none for a folder's ``__main__``)."""
    stem = Path(path).stem if path.endswith(".py") else Path(path).name
    return set() if stem == MAIN else {stem}

"""The ends of a process that skip ``atexit``: SIGTERM, and multiprocessing's workers.

Python runs ``atexit`` handlers when the interpreter exits normally, and that is where a
pipeline writes what it still holds. Two common ends skip them:

- SIGTERM with its default action kills the process at once (``kill``, supervisors, job
  schedulers, a vector env's ``terminate()``). agenttrace installs a SIGTERM handler that ends
  every pipeline of the process (within the ``exit_timeout`` deadline: finished episodes
  written, open ones written as incomplete, spans sent) and then does what the signal would
  have done: the previous Python handler is called (it is chained, never replaced; agenttrace
  only flushes before it, since that handler may let the program go on), the default action
  ends the process by SIGTERM as before, an ignored SIGTERM stays ignored.
- multiprocessing's worker processes end with ``os._exit()`` once their target returns; only
  multiprocessing's own finalizers run. A finalizer registered in each process that makes a
  pipeline ends the pipelines made there.

A pipeline registers itself with :func:`watch`; it is held weakly. Only pipelines made in the
current process are ended here: a forked child's copy of its parent's pipeline is not.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from typing import Any, Protocol

logger = logging.getLogger("agenttrace")


class _Ending(Protocol):
    _pid: int
    settings: Any  # config.Settings (its exit_timeout)

    def _at_exit(self) -> None: ...

    def force_flush(self, timeout_millis: int = ...) -> bool: ...


_watched: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_previous_sigterm: Any = None
_sigterm_installed = False
_handling_sigterm = False
_ending = False  # end_all is running
_deferred_sigterm: tuple[int, Any] | None = None  # a SIGTERM that came while it ran
_finalizer_pid: int | None = None


def watch(pipeline: _Ending) -> None:
    """End ``pipeline`` on SIGTERM and when this process is a multiprocessing worker ending."""
    with _lock:
        _watched.add(pipeline)
    _install_sigterm_handler()
    _finalize_at_worker_end()


def _ours() -> list[_Ending]:
    pid = os.getpid()
    with _lock:
        return [p for p in list(_watched) if getattr(p, "_pid", None) == pid]


def end_all() -> None:
    """Run the exit handler of every pipeline made in this process; never raises.

    A SIGTERM that comes meanwhile (a process pool's worker gets one while it ends by itself)
    is handled once this is done, so it cannot cut the writing short.
    """
    global _ending, _deferred_sigterm
    if _ending:
        return
    _ending = True
    try:
        for pipeline in _ours():
            try:
                pipeline._at_exit()
            except Exception:
                logger.debug("agenttrace: ending a pipeline failed", exc_info=True)
    finally:
        _ending = False
    deferred, _deferred_sigterm = _deferred_sigterm, None
    if deferred is not None:
        _on_sigterm(*deferred)


def _flush_all() -> None:
    for pipeline in _ours():
        try:
            pipeline.force_flush(int(pipeline.settings.exit_timeout * 1000))
        except Exception:
            logger.debug("agenttrace: flushing a pipeline failed", exc_info=True)


# --- SIGTERM ---------------------------------------------------------------------------------


def _install_sigterm_handler() -> None:
    """Chain agenttrace's handler in front of the current one, once, from the main thread."""
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is signal.SIG_IGN or current is None:  # ignored, or set outside Python
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # no signals here (a subinterpreter, ...)
        return
    _previous_sigterm = current
    _sigterm_installed = True


def _on_sigterm(signum: int, frame: Any) -> None:
    global _handling_sigterm, _deferred_sigterm
    if _handling_sigterm:
        # A second SIGTERM while the first is handled: the first goes on to end the process
        # once its pipelines are written.
        return
    if _ending:  # pipelines are being ended (a worker's finalizer): after that
        _deferred_sigterm = (signum, frame)
        return
    _handling_sigterm = True
    try:
        previous = _previous_sigterm
        if callable(previous):
            # The program's own handler decides whether the process ends; it may let it
            # finish its episode first. Write what is finished; exit handlers write the rest.
            _flush_all()
            previous(signum, frame)
            return
        end_all()
    finally:
        _handling_sigterm = False
    # What SIGTERM would have done without us: end the process, reported as killed by it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


# --- multiprocessing workers -----------------------------------------------------------------

#: multiprocessing's finalizers run highest priority first; ours before its own clean-ups.
_FINALIZER_PRIORITY = 100


def _finalize_at_worker_end() -> None:
    """Register :func:`end_all` with multiprocessing's finalizers in this process, once.

    A multiprocessing worker ends with ``os._exit()`` after running them (atexit handlers do
    not run there). A forked worker starts with the registry cleared, and registers again when
    it makes a pipeline of its own (the pid differs).
    """
    global _finalizer_pid
    if _finalizer_pid == os.getpid():
        return
    try:
        from multiprocessing import util
    except Exception:  # pragma: no cover - multiprocessing unavailable
        return
    util.Finalize(None, end_all, exitpriority=_FINALIZER_PRIORITY)
    _finalizer_pid = os.getpid()

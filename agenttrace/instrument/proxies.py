"""What agenttrace puts in place of a patched attribute: pickled and copied as the original.

agenttrace patches with wrapt proxies (``gymnasium.make``, traced targets, the propagation
patches). wrapt's own proxies refuse ``pickle`` and ``copy`` (``NotImplementedError: object
proxy must define __reduce_ex__()``), so a program that pickles a patched function would fail
under agenttrace only: gymnasium's ``make_vec`` sends closures that name ``make`` to
``spawn``/``forkserver`` workers, users send ``functools.partial(gym.make, ...)`` or
``runner.play_episode`` to process pools. Every proxy agenttrace installs is a
:class:`PatchProxy`, bound as a :class:`BoundPatchProxy`; both pickle the way the original
object does, by reference:

* a patched module-level function: the very global reference the original's pickle holds
  (module and qualified name, the same bytes);
* an attribute of a class reached through the class (``Env.step``):
  ``getattr(<the class, by reference>, "step")``, what pickle writes for a method below
  protocol 4;
* a bound method (``env.step``, or a classmethod ``Env.create``): what the original bound
  method's ``__reduce__`` gives, ``getattr(<its object>, "step")``.

The process that unpickles looks the name up and gets whatever is there: the original where
agenttrace is not active (nothing of agenttrace is needed to unpickle), the patched one where
it is. When the name does not lead back to the same function (a class pickled by value, a
function defined in another function), the original object is pickled in the proxy's place,
as the pickler would pickle the original (by value with cloudpickle); a kind may choose
otherwise (traced methods of classes pickled by value stay traced:
:class:`agenttrace.instrument.auto.TracedMethod`).

``copy.copy`` and ``copy.deepcopy`` behave as for the original: a function is its own copy;
a bound method is bound again to its object (``copy``) or to a deep copy of it
(``deepcopy``).
"""

from __future__ import annotations

import copy
import importlib
import operator
import sys
import types
from typing import Any

import wrapt

#: Called with ``(original,)`` on unpickling, it gives ``original``: the original pickled in
#: a proxy's place, without any agenttrace code in the unpickling process.
_FIRST = operator.itemgetter(0)


class _Module:
    """A module in a pickle: unpickled as ``importlib.import_module(name)``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> Any:
        return (importlib.import_module, (self.name,))


def _innermost(obj: Any) -> Any:
    """``obj`` without its wrappers (``__wrapped__``) and method bindings (``__func__``)."""
    for _ in range(64):
        try:
            inner = getattr(obj, "__wrapped__", None)
            if inner is None:
                inner = getattr(obj, "__func__", None)
        except Exception:
            return obj
        if inner is None or inner is obj:
            return obj
        obj = inner
    return obj


def _is_bound(obj: Any) -> bool:
    """A bound method (``obj.step``, ``Class.a_classmethod``, a builtin's method)."""
    receiver = getattr(obj, "__self__", None)
    return receiver is not None and not isinstance(receiver, types.ModuleType)


def _reference(proxy: Any, original: Any) -> Any:
    """How pickle refers to ``original`` by name, when that name leads back to ``proxy``'s
    function: the qualified name (a global reference, identical to the original's pickle)
    when the module attribute is ``proxy`` itself, else ``(getattr, (parent, name))``; None
    when the name leads elsewhere or nowhere."""
    module_name = getattr(original, "__module__", None)
    qualname = getattr(original, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    if "<locals>" in qualname:
        return None
    *path, name = qualname.split(".")
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        parent: Any = module
        for part in path:
            parent = getattr(parent, part)
        found = getattr(parent, name)
    except Exception:
        return None
    if found is proxy and parent is module:
        return qualname  # pickle writes the global reference, checking it leads to proxy
    if _innermost(found) is not _innermost(original):
        return None
    if parent is module:  # (another name for it there, e.g. a second alias)
        return (getattr, (_Module(module_name), name))
    if not isinstance(parent, type):
        return None
    return (getattr, (parent, name))


class BoundPatchProxy(wrapt.BoundFunctionWrapper):
    """A :class:`PatchProxy` bound (``obj.step``, or ``Class.step`` with no instance):
    pickled and copied as the bound method (or function) the original binding gives."""

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> Any:
        original = self.__wrapped__  # (what the original descriptor's __get__ returned)
        if _is_bound(original):
            return original.__reduce_ex__(protocol)  # getattr(its object, its name)
        reference = _reference(self, original)
        if reference is not None:
            return reference
        return (_FIRST, ((original,),))

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)

    def __copy__(self) -> Any:
        original = self.__wrapped__
        if not _is_bound(original):
            return self  # a function is its own copy
        return getattr(original.__self__, original.__name__)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        original = self.__wrapped__
        if not _is_bound(original):
            return self
        return getattr(copy.deepcopy(original.__self__, memo), original.__name__)


class PatchProxy(wrapt.FunctionWrapper):
    """A wrapt ``FunctionWrapper`` that pickles and copies as the object it wraps.

    Installed in place of a module's function or a class's attribute; accessed through an
    instance or its class it becomes a :class:`BoundPatchProxy`.
    """

    #: The type wrapt binds it to (``obj.step``). wrapt looks this attribute up on every
    #: binding; without it a subclass raises and clears an AttributeError each time.
    __bound_function_wrapper__ = BoundPatchProxy

    def __reduce_ex__(self, protocol: Any) -> Any:
        original = self.__wrapped__
        if _is_bound(original):  # (wrapt can wrap a bound method directly)
            return original.__reduce_ex__(protocol)
        reference = _reference(self, original)
        if reference is not None:
            return reference
        return self._reduce_unreachable(protocol)

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)

    def _reduce_unreachable(self, protocol: Any) -> Any:
        """Its name does not lead back to it: the original is pickled in its place."""
        return (_FIRST, ((self.__wrapped__,),))

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self


__all__ = ["BoundPatchProxy", "PatchProxy"]

"""Version and distribution name.

The import name is ``agenttrace``; the name on the package index is :data:`DISTRIBUTION`
(an unrelated project already owns ``agenttrace`` there). Every install hint is built by
:func:`install_hint`, so none can send a user to someone else's code. agenttrace is not on
the package index yet: the hints install from a clone of the repository.
"""

__version__ = "0.1.0"

#: The distribution name (``pip install otel-agenttrace``).
DISTRIBUTION = "otel-agenttrace"


def install_hint(extra: str | None = None) -> str:
    """How to install agenttrace, with ``extra`` when given: from a clone of the repository
    (the distribution is not on the package index yet)."""
    target = "." if extra is None else f"'.[{extra}]'"
    return (
        f"pip install -e {target} from a clone of the repository "
        f"({DISTRIBUTION} is not on the package index yet)"
    )

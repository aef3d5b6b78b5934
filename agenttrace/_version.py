"""Version and distribution name.

The import name is ``agenttrace``; the name on the package index is :data:`DISTRIBUTION`
(an unrelated project already owns ``agenttrace`` there). Every install hint is built by
:func:`install_hint`, so none can send a user to someone else's code.
"""

__version__ = "0.1.0"

#: The distribution name (``pip install otel-agenttrace``).
DISTRIBUTION = "otel-agenttrace"


def install_hint(extra: str | None = None) -> str:
    """The pip command that installs agenttrace, with ``extra`` when given."""
    if extra is None:
        return f"pip install {DISTRIBUTION}"
    return f"pip install '{DISTRIBUTION}[{extra}]'"

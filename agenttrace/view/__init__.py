"""``agenttrace view``: a local, read-only web page over runs and episodes (docs/view.md).

:mod:`~agenttrace.view.index` keeps one small row per episode and reads an episode again when it
is opened; :mod:`~agenttrace.view.queries` answers the pages' questions (filtered pages, counts,
plots, comparisons); :mod:`~agenttrace.view.server` serves the page in ``static/`` and its JSON
API on the HTTP stack that ``collect`` and the gateway use.
"""

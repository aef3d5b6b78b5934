"""Install hints name our distribution, never the index's unrelated ``agenttrace``."""

from __future__ import annotations

import re
from importlib.metadata import distribution
from pathlib import Path

from agenttrace._version import DISTRIBUTION, __version__, install_hint

ROOT = Path(__file__).resolve().parent.parent
#: ``pip install`` followed by anything that names agenttrace as a requirement.
_INSTALLS_AGENTTRACE = re.compile(
    r"pip install[^\n`&;|]*?['\"]?\b([\w.-]*agenttrace[\w.-]*)(\[|\b)"
)


def test_the_project_is_published_under_the_distribution_name():
    (name,) = re.findall(r'^name = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert name == DISTRIBUTION == "otel-agenttrace"
    assert distribution(DISTRIBUTION).version == __version__
    assert install_hint() == "pip install otel-agenttrace"
    assert install_hint("parquet") == "pip install 'otel-agenttrace[parquet]'"


def test_every_install_hint_in_code_and_docs_names_the_distribution():
    texts = [
        *ROOT.joinpath("agenttrace").rglob("*.py"),
        *ROOT.joinpath("docs").glob("*.md"),
        *ROOT.joinpath("examples").rglob("*.md"),
        ROOT / "README.md",
    ]
    wrong = []
    for path in texts:
        for match in _INSTALLS_AGENTTRACE.finditer(path.read_text()):
            if match.group(1) != DISTRIBUTION:
                wrong.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert not wrong, wrong
    hints = [p for p in texts if DISTRIBUTION in p.read_text()]
    assert len(hints) >= 5  # the docs do name it: sinks, storage, LLM calls, metrics, README

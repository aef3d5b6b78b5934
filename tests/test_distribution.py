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
    # Not on the package index yet: every hint installs from a clone, honestly said.
    assert install_hint().startswith("pip install -e . from a clone of the repository")
    assert install_hint("parquet").startswith("pip install -e '.[parquet]' from a clone")
    assert "otel-agenttrace is not on the package index yet" in install_hint("parquet")


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
    # The README names it, and says it is not on the package index yet.
    readme = (ROOT / "README.md").read_text()
    assert DISTRIBUTION in readme and "not on the package index yet" in readme

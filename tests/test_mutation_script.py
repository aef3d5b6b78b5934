"""scripts/mutation.py stays runnable: each module it scores and each test file it runs exist.

The mutation runs themselves take minutes per module and are not part of the suite (README,
Development); this keeps their configuration from rotting as files move.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "mutation.py"


def load_script():
    spec = importlib.util.spec_from_file_location("mutation_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_core_modules_are_scored():
    script = load_script()
    modules = script.MODULES
    assert set(modules) == {
        "outcome", "codec", "assembler", "call_placement", "conventions", "queries",
        "view_index",
    }  # fmt: skip
    for name in modules:
        assert (ROOT / script.module_path(name)).is_file(), name
    assert script.module_path("queries") == "agenttrace/view/queries.py"
    assert script.module_path("view_index") == "agenttrace/view/index.py"


@pytest.mark.parametrize("module", sorted(load_script().MODULES))
def test_each_module_runs_against_test_files_that_exist(module):
    tests = load_script().MODULES[module]
    assert tests, module
    missing = [t for t in tests if not (ROOT / t).is_file()]
    assert not missing, missing


def test_an_unknown_module_is_refused_with_the_known_ones_named():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--module", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown module(s) ['nowhere']" in done.stderr and "outcome" in done.stderr

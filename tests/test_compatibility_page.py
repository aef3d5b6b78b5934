"""docs/compatibility.md is generated from the tests that check it (tests/compatibility.py)."""

from __future__ import annotations

import compatibility


def test_the_page_is_what_the_tests_declare() -> None:
    rendered = compatibility.render()
    assert compatibility.PAGE.read_text(encoding="utf-8") == rendered, (
        "docs/compatibility.md drifted from the tests: run python3 tests/compatibility.py"
    )


def test_every_declaring_module_has_rows_and_checks_them() -> None:
    modules = compatibility.declaring_modules()
    assert modules, "no test module declares COMPATIBILITY"
    for entry in compatibility.entries():
        source = (compatibility.TESTS / f"{entry.module}.py").read_text(encoding="utf-8")
        # the module's tests are parametrized over what its rows call equal
        assert "equal_fields()" in source, entry.module

"""Mutation testing of the trajectory rebuild (and the viewer's queries and index): mutmut's
full run, one module at a time.

    python3 scripts/mutation.py                      # all modules below, one after another
    python3 scripts/mutation.py --module outcome     # one (a name below, or its path)
    python3 scripts/mutation.py --module codec --max-children 1 --keep

Each module runs in a scratch copy of this checkout (``agenttrace/``, ``tests/`` and a
``pyproject.toml`` holding only the ``[tool.mutmut]`` section for that module), so the working
tree gets no ``mutants/`` folder and other work in it cannot change a run midway. mutmut
copies the package into ``mutants/``, runs the module's test files once to learn which tests
call which function, then runs each mutant against the tests that call its function
(``pytest -x``). The test files are the ones that exercise the module (MODULES below): its own
rule tests first, then the fast unit tests that read the same code; the slow end-to-end tests
(subprocesses, servers, real frameworks) are left out, since mutants live only in the test
process.

No mutant is excluded: the scores count every mutant mutmut makes, the equivalent ones (that
cannot change behaviour, such as ``bits.find(0, None, end)`` for ``bits.find(0, 0, end)``)
included, so a score is a floor.

The summary (killed / total per module, the survivors with their diffs) is printed and
written to ``mutation-summary.md`` (or ``--summary PATH``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Module -> the test files that exercise it, fastest and most pointed first.
MODULES: dict[str, list[str]] = {
    "outcome": [
        "tests/test_outcome_rules.py",
        "tests/test_assembler_rules.py",
    ],
    "call_placement": [
        "tests/test_call_placement_rules.py",
        "tests/test_assembler_rules.py",
        "tests/test_call_merging.py",
        "tests/test_turns.py",
        "tests/test_stream.py",
    ],
    "assembler": [
        "tests/test_assembler_rules.py",
        "tests/test_assembler_rules_steps.py",
        "tests/test_outcome_rules.py",
        # (not test_read_isolation.py: its JSON nested past the stack loads in the scratch
        # copy, whose recursion limit is raised, so mutmut's stats run fails on it)
    ],
    "conventions": [
        "tests/test_conventions_rules.py",
        "tests/test_conventions.py",
        "tests/test_conventions_openinference.py",
    ],
    "queries": [
        "tests/test_view_queries.py",
    ],
    "view_index": [
        "tests/test_view_index.py",
        "tests/test_view_queries.py",
        "tests/test_view.py",
    ],
    "codec": [
        "tests/test_codec_rules.py",
        "tests/test_equality_rules.py",
        # (not test_bad_input.py: it expects the once-per-type fallback warning, which
        # mutmut's stats run, in the same process, has already given)
    ],
}

#: Modules outside agenttrace/trajectory/: their paths.
PATHS = {"queries": "agenttrace/view/queries.py", "view_index": "agenttrace/view/index.py"}

#: mutmut's result words (``mutmut results --all true``) -> the summary's columns.
_COLUMNS = ("killed", "survived", "timeout", "no tests", "suspicious", "skipped", "other")


def module_path(module: str) -> str:
    return PATHS.get(module, f"agenttrace/trajectory/{module}.py")


def _scratch(module: str, workdir: Path, root: Path) -> None:
    """A copy of the checkout at ``root`` to run mutmut in, configured for ``module``."""
    shutil.copytree(root / "agenttrace", workdir / "agenttrace", ignore=_ignored)
    shutil.copytree(root / "tests", workdir / "tests", ignore=_ignored)
    # mutmut's trampolines add frames to every call: the codec's recursive encoder, which
    # stops at MAX_DEPTH (256) levels well within Python's 1,000 frames, would not.
    with open(workdir / "tests" / "conftest.py", "a", encoding="utf-8") as conftest:
        conftest.write("\n\nsys.setrecursionlimit(max(sys.getrecursionlimit(), 4000))\n")
    tests = [t for t in MODULES[module] if (root / t).exists()]
    config = root / "pyproject.toml"
    text = config.read_text(encoding="utf-8")
    # Only the pytest section is kept (its options, markers and warning filters).
    pytest_section = re.search(r"\[tool\.pytest\.ini_options\].*?(?=\n\[|\Z)", text, re.S)
    quoted = ", ".join(f'"{t}"' for t in tests)
    (workdir / "pyproject.toml").write_text(
        (pytest_section.group(0) if pytest_section else "")
        + "\n\n[tool.mutmut]\n"
        + 'source_paths = ["agenttrace"]\n'
        + f'only_mutate = ["{module_path(module)}"]\n'
        + f"pytest_add_cli_args_test_selection = [{quoted}]\n"
        + 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:phoenix"]\n'
        + "use_git_change_detection = false\n"
        + "track_dependencies = false\n",
        encoding="utf-8",
    )


def _ignored(_folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n in ("__pycache__", ".hypothesis", ".pytest_cache")]


def _results(workdir: Path) -> dict[str, str]:
    """mutant name -> mutmut's status word."""
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    statuses = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            statuses[name] = status.strip()
    return statuses


def _diff(workdir: Path, name: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def run_module(module: str, root: Path, max_children: int, keep: bool) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"mutation-{module}-"))
    started = time.monotonic()
    try:
        _scratch(module, workdir, root)
        env = {**os.environ, "PYTHONPATH": str(workdir)}
        log = workdir / "mutmut.log"
        with open(log, "w", encoding="utf-8") as handle:
            code = subprocess.run(
                [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)],
                cwd=workdir,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                check=False,
            ).returncode
        statuses = _results(workdir)
        if code != 0 or not statuses:
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SystemExit(f"mutmut failed on {module} (exit {code}):\n{tail}")
        counts = dict.fromkeys(_COLUMNS, 0)
        for status in statuses.values():
            counts[status if status in counts else "other"] += 1
        survivors = [n for n, s in sorted(statuses.items()) if s != "killed"]
        diffs = {n: _diff(workdir, n) for n in survivors}
        return {
            "module": module,
            "total": len(statuses),
            "counts": counts,
            "diffs": diffs,
            "statuses": {n: statuses[n] for n in survivors},
            "seconds": time.monotonic() - started,
            "tests": MODULES[module],
        }
    finally:
        if keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def summary(results: list[dict]) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        f"# Mutation testing, {today}",
        "",
        "Command: `python3 scripts/mutation.py "
        + " ".join(f"--module {r['module']}" for r in results)
        + "` (mutmut's full run, not a sample)",
        "",
        "| module | killed / total | score | survived | timeout | no tests | minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c, total = r["counts"], r["total"]
        score = 100.0 * c["killed"] / total if total else 0.0
        lines.append(
            f"| `{module_path(r['module']).removeprefix('agenttrace/')}` | {c['killed']} / {total} "
            f"| {score:.1f} % "
            f"| {c['survived']} | {c['timeout']} | {c['no tests']} | {r['seconds'] / 60:.0f} |"
        )
    for r in results:
        if r["diffs"]:
            lines += ["", f"## Not killed in {r['module']}.py", ""]
            for name, diff in r["diffs"].items():
                lines += [f"### {name} ({r['statuses'][name]})", "", "```diff", diff, "```", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", help="a module of MODULES (repeatable)")
    parser.add_argument("--max-children", type=int, default=1, help="mutants run at once")
    parser.add_argument("--summary", default=str(ROOT / "mutation-summary.md"))
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to copy (default: this)")
    args = parser.parse_args(argv)
    modules = [Path(m).stem for m in args.module] if args.module else list(MODULES)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; one of {list(MODULES)}")
    results = []
    for module in modules:  # (one at a time: the machine is shared)
        results.append(run_module(module, Path(args.root), args.max_children, args.keep))
        text = summary(results)
        Path(args.summary).write_text(text, encoding="utf-8")
        r = results[-1]
        print(f"{module}: {r['counts']['killed']} / {r['total']} killed", flush=True)
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Claims in README.md and docs/*.md that can be checked are checked, so the docs cannot drift.

What is checked here: the commands (how many, which, in the README, docs/cli.md and
``--help``); every option of every command described in its section of docs/cli.md, and every
option named there real; the exit-code table (docs/cli.md, ``agenttrace --help``, the code);
defaults and limits quoted in docs/cli.md; the number of example programs; the episode
statuses; what the docs say about installing; ``inspect`` reading folders recursively; help
texts in plain text; every ``agenttrace`` command line in the docs' shell blocks parses.

Checked elsewhere, not repeated: the settings table of docs/configuration.md against
agenttrace/config.py (tests/test_config.py), the README's snippets, commands and links
(tests/test_readme.py), and every install hint naming the distribution
(tests/test_distribution.py).
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
from test_readme import shell_commands

from agenttrace import semconv as sc
from agenttrace.cli import episode_view, export_outputs
from agenttrace.cli.exits import EXIT_CODES, exit_epilog
from agenttrace.cli.main import build_parser, commands
from agenttrace.cli.summary import STEP_TIME_SAMPLES
from agenttrace.storage.span_paths import SNIFF_BYTES
from agenttrace.trajectory.conventions import PRESETS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8
}  # fmt: skip
WORDS = {n: word for word, n in NUMBERS.items()}
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def default(command: str, dest: str):
    return subparsers()[command].get_default(dest)


def sections(text: str) -> dict[str, str]:
    """docs/cli.md's ``## `agenttrace NAME` `` sections, by command name."""
    found = {}
    for part in re.split(r"^## ", text, flags=re.M):
        match = re.match(r"`agenttrace (\w+)`", part)
        if match:
            found[match.group(1)] = part
    return found


def markdown_table(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading`` (its header and rule left out)."""
    after = text[text.index(heading) :]
    lines = [line for line in after.splitlines() if line.startswith("|")]
    start = after.splitlines().index(lines[0])
    rows = []
    for line in after.splitlines()[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows[2:]


# --- commands -------------------------------------------------------------------------------


#: The commands, in the order docs/cli.md and the README list them.
COMMANDS = ["demo", "export", "inspect", "score", "collect", "gateway", "run", "view"]


def test_the_commands_are_the_same_everywhere(capsys) -> None:
    names = commands(build_parser())
    assert sorted(names) == sorted(COMMANDS)
    count = WORDS[len(names)]
    # docs/cli.md: the count, the usage block, a section each.
    assert CLI_DOC.splitlines()[2].startswith(f"{count.capitalize()} commands: ")
    usage = re.search(r"^```\n(agenttrace --version\n.*?)^```", CLI_DOC, re.S | re.M).group(1)
    assert [line.split()[1] for line in usage.splitlines()[1:]] == COMMANDS
    assert set(sections(CLI_DOC)) == set(names)
    # README: the layout line and the documentation list.
    assert f"cli/             agenttrace {' | '.join(COMMANDS)}" in README
    (docs_line,) = [line for line in README.splitlines() if "(docs/cli.md):" in line]
    assert f"the {count} commands" in docs_line
    assert all(f"`agenttrace {name}`" in docs_line for name in names)
    # --help lists each.
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    shown = capsys.readouterr().out
    assert all(re.search(rf"^    {name}\s", shown, re.M) for name in names)


def test_every_option_is_described_in_its_section_and_every_option_named_is_real() -> None:
    parsers = subparsers()
    documented = sections(CLI_DOC)
    every = {name: options(parser) for name, parser in parsers.items()}
    for name in parsers:
        text = documented[name]
        missing = [
            o for o in sorted(every[name]) if not re.search(re.escape(o) + r"(?![\w-])", text)
        ]
        assert not missing, f"agenttrace {name}: options not in docs/cli.md: {missing}"
        for line in text.splitlines():
            for option in OPTION.findall(line):
                if option in every[name] or option in ("--help", "--version"):
                    continue
                # An option of another command, on a line that names that command.
                others = [c for c in every if c != name and f"agenttrace {c}" in line]
                assert any(option in every[c] for c in others), (name, option, line)
    for text in (README, *DOCS.values()):
        for option in OPTION.findall(text):
            known = set().union(*every.values()) | {"--help", "--version"}
            if option not in known:
                assert not re.search(rf"agenttrace \w+[^\n`]*{re.escape(option)}\b", text), option


def test_demo_and_inspect_option_tables_give_the_real_defaults() -> None:
    demo = {row[0]: row for row in markdown_table(sections(CLI_DOC)["demo"], "| option |")}
    assert demo["`--episodes N`, `-n N`"][1] == str(default("demo", "episodes")) == "50"
    assert demo["`--concurrency K`, `-k K`"][1] == str(default("demo", "concurrency")) == "8"
    inspect = {row[0]: row for row in markdown_table(sections(CLI_DOC)["inspect"], "| option |")}
    assert set(inspect) == {
        "`--episode ID`",
        "`--worst N`",
        "`--status STATUS`",
        "`--max-chars N`",
        "`--json`",
    }
    assert f"(default {episode_view.MAX_CHARS}; 0: never cut)" in inspect["`--max-chars N`"][1]
    assert default("inspect", "max_chars") == episode_view.MAX_CHARS
    statuses = ", ".join(f"`{status}`" for status in sc.EPISODE_STATUSES)
    assert f"({statuses})" in inspect["`--status STATUS`"][1]


def test_export_defaults_and_limits_quoted_in_the_docs() -> None:
    text = sections(CLI_DOC)["export"]
    assert f"`--grace N` more spans (default {default('export', 'grace')})" in text
    assert f"traces per backend search (default {default('export', 'limit')})" in text
    assert f"the seconds per request (default {default('export', 'timeout'):g})" in text
    assert f"`--max-episode-bytes BYTES` (default {default('export', 'max_episode_bytes')}," in text
    for preset in re.search(r"the presets (.*?) and mapping files", text, re.S).group(1).split():
        assert preset.strip("`,") in PRESETS
    assert "the first five" in text and export_outputs.SHOWN_ERRORS == 5
    assert f"first\n{SNIFF_BYTES // 1024} KiB" in CLI_DOC or f"first {SNIFF_BYTES // 1024} KiB" in (
        CLI_DOC
    )
    samples = f"{STEP_TIME_SAMPLES:,}".replace(",", " ")
    assert f"Exact up to {samples} steps, estimated from a uniform sample of {samples}" in CLI_DOC
    assert f"more than {episode_view.ARRAY_ELEMENTS}" in CLI_DOC
    assert f"their first {episode_view.MAX_ITEMS} items" in CLI_DOC


# --- exit codes -----------------------------------------------------------------------------


def test_the_exit_code_table_is_the_code_and_the_help() -> None:
    rows = markdown_table(CLI_DOC, "## Exit status")
    assert [(int(code), name, when) for code, name, when in rows] == [
        (code, name, when) for code, name, _, when in EXIT_CODES
    ]
    parser = build_parser()
    assert exit_epilog() in parser.format_help()
    for code, name, short, _ in EXIT_CODES:
        assert f"  {code:<4}{name}: {short}" in parser.format_help()
    # Each command's own exit paragraph or table uses only these codes.
    known = {code for code, *_ in EXIT_CODES}
    for name, text in sections(CLI_DOC).items():
        sentence, following, *_ = [*text[text.index("Exit status") :].split("\n\n"), ""]
        in_tables = set()
        if following.startswith("|"):  # the sentence introduces a table: its codes
            rows = [line.strip("|").split(" | ")[0].strip() for line in following.splitlines()]
            in_tables = {int(code) for code in rows[2:]}
        in_sentences = {int(n) for n in re.findall(r"(?:^|[:;(] ?)(\d+) [a-z]", sentence)}
        assert (in_tables | in_sentences) <= known, name
        assert in_tables or in_sentences, f"{name}: no exit status described"
    for name, parser in subparsers().items():  # every command's --help says its codes
        epilog = (parser.epilog or "").replace("\n", " ")
        assert "Exit status: 0 " in epilog, name
        assert {int(n) for n in re.findall(r"(?:: |; )(\d+) ", epilog)} <= known, name


# --- counts and lists -------------------------------------------------------------------------


def test_the_number_of_example_programs() -> None:
    programs = sorted(p.parent.name for p in (ROOT / "examples").glob("*/README.md"))
    word = WORDS[len(programs)]
    assert f"for {word} programs modelled on real runners" in " ".join(README.split())
    assert f"[examples/](examples/README.md): {word} runnable programs" in README
    index = (ROOT / "examples" / "README.md").read_text()
    assert sorted(re.findall(r"^\| \[(\w+)\]\(\1/README\.md\)", index, re.M)) == programs


def test_the_episode_statuses() -> None:
    count = WORDS[len(sc.EPISODE_STATUSES)].capitalize()
    (line,) = [line for line in README.split("\n\n") if "episode statuses:" in line]
    assert line.strip().startswith(f"- {count} episode statuses:")
    named = re.findall(r"`(\w+)`", line.split("(", 1)[0])
    assert named == list(sc.EPISODE_STATUSES)


def test_inspect_reads_folders_recursively_as_documented(tmp_path, capsys) -> None:
    from agenttrace.cli.main import main
    from agenttrace.sinks import JsonlSink
    from agenttrace.trajectory.model import Trajectory

    for run, episode in (("a", "e1"), ("b/deeper", "e2")):
        sink = JsonlSink(tmp_path / "runs" / run)
        sink.write(Trajectory(episode_id=episode))
        sink.close()
    assert main(["inspect", str(tmp_path / "runs")]) == 0
    assert "2 episodes" in capsys.readouterr().out
    text = sections(CLI_DOC)["inspect"]
    assert "not recursive" not in text and "A folder is\nsearched recursively" in text


# --- installing -----------------------------------------------------------------------------


def test_the_docs_do_not_send_anyone_to_the_package_index_yet() -> None:
    """agenttrace is not published yet: no doc says ``pip install otel-agenttrace`` works
    (when it is published, this test goes, and the install lines may come back)."""
    claims = []
    for name, text in {"README.md": README, **{f"docs/{n}": t for n, t in DOCS.items()}}.items():
        claims += [
            f"{name}: {m}" for m in re.findall(r"pip install ['\"]?otel-agenttrace\S*", text)
        ]
        claims += [f"{name}: {m}" for m in re.findall(r"from PyPI", text)]
    assert not claims, claims
    assert "not on the package index yet" in README
    assert "python3 -m pip install -e ." in README


# --- help -------------------------------------------------------------------------------------


MARKUP = re.compile(r"``|:(?:func|class|mod|meth|data|attr|envvar|ref|doc):|\*\*|\[/?[a-z ]+\]")


@pytest.mark.parametrize("command", ["", "demo", "export", "inspect", "score"])
def test_help_texts_are_plain(command, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    parser = build_parser() if not command else subparsers()[command]
    text = parser.format_help()
    assert not MARKUP.findall(text), MARKUP.findall(text)


def test_every_agenttrace_command_in_the_docs_parses() -> None:
    parser = build_parser()
    checked = 0
    for name, text in DOCS.items():
        lines = shell_commands(text)
        lines += [m for m in re.findall(r"^\$ (agenttrace .*)$", text, re.M)]
        for line in lines:
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
                words = shlex.split(part.split("   #", 1)[0])
                while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                    words = words[1:]
                if words[:1] != ["agenttrace"]:
                    continue
                if ">" in words:
                    words = words[: words.index(">")]
                try:
                    parser.parse_args(words[1:])
                except SystemExit as exc:
                    pytest.fail(f"docs/{name}: does not parse: {part!r} ({exc})")
                checked += 1
    assert checked >= 15

"""Every command's ``--help`` reads as written (issue 28 item 9): no Python annotations for
types (``<bool>`` beside a flag, ``<list[str]>``, ``{query}`` in the usage line), no RST
markup (````code````), no docstring line breaks in the middle of a sentence, and every
``--json`` says what it does. Walks the whole command tree, so a new command is covered."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from mnemovault.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "400"}


def _commands(group: typer.core.TyperGroup | typer.core.TyperCommand,
              path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if not cmd.hidden:
            yield from _commands(cmd, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_the_walk_finds_the_command_tree() -> None:
    names = {" ".join(c) for c in COMMANDS}
    assert {"", "recall", "import", "review approve", "audit verify", "server start"} <= names
    assert len(COMMANDS) > 60


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "(root)")
def test_help_reads_as_written(command: tuple[str, ...]) -> None:
    res = runner.invoke(app, [*command, "--help"], env=WIDE)
    assert res.exit_code == 0, res.output
    text = res.output
    assert not re.search(r"<(bool|str|int|float|list\[[^>]*\]|datetime|path|file)>", text), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage
    assert "``" not in text, text
    for line in text.splitlines():
        if re.search(r"--json\b", line):
            assert "Print JSON on stdout" in line, (command, line)


def test_a_docstring_line_break_does_not_break_the_command_list() -> None:
    text = runner.invoke(app, ["--help"], env=WIDE).output
    flagged = next(line for line in text.splitlines() if line.strip("│ ").startswith("flagged"))
    assert "(imported or tool-supplied text with phrasing aimed at a model)" in flagged, flagged


@pytest.mark.parametrize("args", [["list", "--tenant", "t1"], ["review", "approve", "7", "-v"],
                                  ["recall", "x", "--data-dir", "/tmp/x"]])
def test_a_global_option_after_the_command_says_where_it_goes(args: list[str]) -> None:
    res = runner.invoke(app, args, env=WIDE)
    assert res.exit_code == 2
    text = " ".join(res.output.replace("│", " ").split())
    option = args[-1] if args[-1].startswith("-") else args[-2]
    command = " ".join(a for a in args if a not in (option, "t1", "/tmp/x", "7", "x"))
    assert f"{option} is a global option: it goes before the command" in text, text
    assert f"{option}" in text.split("as in")[1] and command in text.split("as in")[1], text

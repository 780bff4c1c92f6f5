"""Every `ember …` command the README, the docs and the CLI's own advice name exists: each command word is one of
the CLI's (sub)commands, and each --option is one that command takes. Prose names a command without its
arguments ("`ember run` follows the job") and synopses bracket what is optional, so required arguments are
not asked for; a word or option the parser does not know is."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from engine.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
# The window's own words (app/__main__.py) and the packaged app's Python pass-through (docs/packaging.md).
APP_WORDS = {"install-desktop-entry", "--page", "--version", "--measure-startup", "--exit-after-paint",
             "-m", "-c", "-u", "-I", "-E", "-s", "-B", "-P", "-O", "[flags]", "[-u|-I|-E|-s|-B|-P|-O"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return action.choices
    return None


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}  # noqa: SLF001


def problem(words: list[str]) -> str | None:
    """What is wrong with ``ember WORDS`` (None when the CLI knows every word and option in it)."""
    if not words or words[0] in APP_WORDS:
        return None
    parser, path = build_parser(), ["ember"]
    rest = list(words)
    while rest and not rest[0].startswith("-"):
        choices = _subcommands(parser)
        if choices is None:
            break
        if rest[0] not in choices:
            return f"`{' '.join(path)}` has no command {rest[0]!r} (it has: {', '.join(sorted(choices))})"
        parser = choices[rest.pop(0)]
        path.append(parser.prog.split()[-1])
    known = _options(parser)
    for word in rest:
        option = word.strip("[]").split("=", 1)[0]
        if option.startswith("--") and option not in known:
            return f"`{' '.join(path)}` takes no option {option} (it takes: {', '.join(sorted(known))})"
    return None


def commands_in(text: str) -> list[tuple[int, str]]:
    """(line, command) for each `ember …` in fenced code (one per line) or in inline code."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            stripped = re.sub(r"^\$ ", "", line.strip())
            candidates = [stripped] if stripped.startswith("ember ") else []
        else:
            candidates = re.findall(r"`(ember [^`]+)`", line)
        found += [(number, command) for command in candidates]
    return found


def clean(command: str) -> str:
    """The command alone: no comment, pipe, redirect, second command, description column or closing prose."""
    command = re.split(r"\s+#|\s(?:\||&&|<|>)\s|;|\s{2,}", command)[0]
    command = re.sub(r"<[^>]+>", "X", command).replace("…", "")
    words = []
    for word in command.split():
        if word.startswith(("(", "`")) or "``" in word or word in ("...",) or re.search(r"[|`)]", word.rstrip(".,:")):
            break
        words.append(word.rstrip(".,:"))
    return " ".join(words)


def test_every_command_the_docs_and_the_cli_name_exists():
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "engine" / "cli").glob("*.py"))]
    wrong, seen = [], 0
    for source in sources:
        text = source.read_text(encoding="utf-8")
        if source.suffix == ".py":  # the CLI's advice: "stop it with: ember stop ID"
            commands = [(text[:m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"(ember [a-z][^\"'{}\n]*)", text)]
        else:
            commands = commands_in(text)
        for line, command in commands:
            command = clean(command)
            try:
                words = shlex.split(command)[1:]
            except ValueError:
                continue
            seen += 1
            why = problem(words)
            if why:
                wrong.append(f"{source.relative_to(ROOT)}:{line}: {command}: {why}")
    assert seen > 150  # the scan found the docs' commands
    assert not wrong, "\n".join(wrong)


def test_a_command_or_option_the_cli_lacks_is_caught():
    assert problem(["jobs", "stop", "ID"]).startswith("`ember jobs` has no command 'stop'")
    assert "takes no option --revisoin" in problem(["models", "download", "x/y", "--revisoin", "main"])
    assert problem(["stop", "ID"]) is None and problem(["models", "download", "x/y", "[--revision", "REV]"]) is None

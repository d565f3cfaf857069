"""The documentation cannot drift from the code: every command and option of the real command line appears in
docs/commands.md, in its command's section; the README stays short; every relative link of the README and of
docs/*.md points at a file that exists (and at a heading that exists, where it names one)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from kfoundry.cli import app

ROOT = Path(__file__).resolve().parents[1]
COMMANDS_MD = ROOT / "docs" / "commands.md"
README = ROOT / "README.md"
README_MAX_LINES = 250
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def walk(command, path: tuple[str, ...] = ()):
    """(path, command) for the root and every command and subcommand under it: the parser typer builds."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, path + (name,))


def option_names(command) -> list[str]:
    """Each option's long forms (the short form where it has no long one), hidden ones included."""
    names = []
    for param in command.params:
        if param.param_type_name != "option":
            continue
        given = list(param.opts) + list(param.secondary_opts)
        long = [name for name in given if name.startswith("--")]
        names += long or given
    return names


COMMANDS = list(walk(typer.main.get_command(app)))


def sections(text: str) -> dict[str, str]:
    """The level-2 sections of a page, by heading (without its backticks), each with its subsections."""
    found, heading, lines = {}, None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if heading is not None:
                found[heading] = "\n".join(lines)
            heading, lines = line[3:].strip().replace("`", ""), []
        elif heading is not None:
            lines.append(line)
    if heading is not None:
        found[heading] = "\n".join(lines)
    return found


def section_for(path: tuple[str, ...], found: dict[str, str]) -> tuple[str, str]:
    """The section of `kfoundry PATH`, else that of the nearest group above it (`kfoundry library` holds its
    subcommands)."""
    for end in range(len(path), -1, -1):
        heading = " ".join(("kfoundry",) + path[:end])
        if heading in found:
            return heading, found[heading]
    raise AssertionError(f"docs/commands.md has no section '## `kfoundry {' '.join(path)}`'")


def test_the_walk_finds_every_command():
    paths = {" ".join(path) for path, _ in COMMANDS}
    assert {"eval", "diagnose", "generate", "optimize", "bench", "report", "doctor", "config show",
            "library list", "library prune"} <= paths
    assert "--max-evals" in option_names(dict(COMMANDS)[("optimize",)])
    assert "-k" in option_names(dict(COMMANDS)[("library", "search")])


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(path) or "kfoundry" for path, _ in COMMANDS])
def test_every_command_and_option_is_in_commands_md(path, command):
    text = COMMANDS_MD.read_text(encoding="utf-8")
    if path:
        assert f"kfoundry {' '.join(path)}" in text, f"kfoundry {' '.join(path)} is not in docs/commands.md"
    heading, section = section_for(path, sections(text))
    missing = [name for name in option_names(command)
               if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", section)]
    assert not missing, f"options of `kfoundry {' '.join(path)}` missing from section '{heading}': {missing}"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move text to docs/"


def test_readme_keeps_the_two_set_up_commands():
    """CI runs the README's test command; the set-up command runs the main job on a bundled example."""
    text = README.read_text(encoding="utf-8")
    assert "\nbash scripts/test.sh\n" in text
    assert "\nbash scripts/setup.sh && .venv/bin/kfoundry optimize examples/pointwise_chain/problem.py" in text


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files_that_exist(page):
    broken = []
    for target in links(page):
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_link_check_sees_links():
    assert "docs/commands.md" in links(README)
    assert slug("## `kfoundry config show`".lstrip("#")) == "kfoundry-config-show"
    assert slug("Precision, on the GPU and on the CPU") == "precision-on-the-gpu-and-on-the-cpu"


def command_lines(page: Path) -> list[str]:
    """The `kfoundry ...` lines of a page's bash (or unnamed) code blocks, continuation lines joined; synopses
    (with `[` or `|`) and the options that act while parsing (--version, completion) left out."""
    found = []
    text = page.read_text(encoding="utf-8")
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang not in ("", "bash"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\.venv/bin/", "", line.split(" #")[0].split("&& ")[-1].strip())
            if line.startswith("kfoundry ") and not re.search(r"\[|\||--version|completion", line):
                found.append(line)
    return found


def parse(args: list[str]) -> None:
    """Parse a command line with the real parsers, group by group, without running the command."""
    root = typer.main.get_command(app)
    command, context = root, root.make_context("kfoundry", list(args))
    rest = list(getattr(context, "_protected_args", getattr(context, "protected_args", []))) + context.args
    while hasattr(command, "commands") and rest:
        name, rest = rest[0], rest[1:]
        command = command.commands[name]
        context = command.make_context(name, list(rest), parent=context)
        rest = (list(getattr(context, "_protected_args", getattr(context, "protected_args", []))) + context.args
                if hasattr(command, "commands") else [])


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_example_commands_parse(page):
    bad = []
    for line in command_lines(page):
        try:
            parse(shlex.split(line)[1:])
        except Exception as exc:  # click's usage errors, an unknown command
            bad.append(f"{line}: {exc}")
    assert not bad, f"{page.relative_to(ROOT)}: example commands the command line refuses: {bad}"


def test_the_example_check_sees_examples():
    assert any(line.startswith("kfoundry optimize") for line in command_lines(README))
    with pytest.raises(Exception):
        parse(["optimize", "p.py", "--llm-timeout", "900"])  # generate's option, not optimize's

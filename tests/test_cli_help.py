"""kfoundry.cli_help and --help as a user reads it: choices shown and completed, flags without a type,
no bracket eaten by rich's markup, and a --help that loads neither torch nor Triton (what would make it slow)."""

import inspect
import json
import os
import subprocess
import sys
from typing import get_args

import pytest
import typer.main
from rich.text import Text

from kfoundry import cli, cli_help
from tests.test_cli import KFOUNDRY, in_process


def _commands():
    """(name, click command) of every command and group of the app, the app itself first."""
    def walk(command, path):
        yield " ".join(path), command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(cli.app), ["kfoundry"]))


def test_help_loads_neither_torch_nor_triton():
    # what makes --help slow is importing torch, Triton or numpy (seconds, where the help itself takes
    # milliseconds): checked by what the process loaded, not by a clock
    script = ("import json, sys\n"
              "sys.argv = ['kfoundry', '--help']\n"
              "from kfoundry import cli\n"
              "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
              "print('RESULT', json.dumps(sorted(m for m in sys.modules "
              "if m.partition('.')[0] in ('torch', 'triton', 'numpy'))))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "eval" in done.stdout and "optimize" in done.stdout  # the help itself was printed
    assert json.loads(done.stdout.rsplit("RESULT ", 1)[1]) == []


def test_every_command_shows_its_help():
    for name, _ in _commands():
        words = name.split()[1:]
        result = in_process(*words, "--help")
        assert result.returncode == 0, (name, result.stderr)


def test_no_help_text_loses_a_bracket_to_rich_markup():
    lost = []
    for name, command in _commands():
        texts = [("help", command.help or ""), ("short help", command.short_help or "")]
        texts += [(p.name, getattr(p, "help", None) or "") for p in command.params]
        for what, text in texts:
            text = inspect.cleandoc(text)
            if Text.from_markup(text).plain != text.replace("\\[", "["):
                lost.append(f"{name} {what}: {text[:80]}")
    assert lost == []
    shown = in_process("optimize", "--help").stdout
    assert "kfoundry[embeddings]" in " ".join(shown.split())


@pytest.mark.parametrize("command, shown", [
    ("optimize", ["<ring|all-to-all>", "<tournament|proportional>", "<fp32|fp16|bf16>", "<strict|permissive>",
                  "<on|strict|off>", "<triton|cuda>", "<NAME=VALUE>", "<SPEC>", "<FILE>"]),
    ("eval", ["<fp32|fp16|bf16>", "<NAME,...>"]),
    ("generate", ["<initializer|repair|memory|compute|fusion|algorithm|crossover>"]),
    ("bench", ["<optimize|solutions|reference>"]),
])
def test_choices_are_shown_and_flags_show_no_type(command, shown):
    text = in_process(command, "--help").stdout
    for item in shown:
        assert item in text, item
    assert "<bool>" not in text and "<list[" not in text


def test_a_choice_outside_the_list_is_refused_before_anything_runs(problems_dir, candidates_dir):
    result = in_process("optimize", problems_dir / "affine.py", "--topology", "star")
    assert result.returncode == 2 and "'star' is not one of 'ring', 'all-to-all'" in result.stderr


def test_the_choices_are_the_names_the_code_accepts():
    from kfoundry.bench.settings import METHODS as BENCH_METHODS
    from kfoundry.evaluate.parent.options import BASELINE_NAMES, SANDBOX_MODES
    from kfoundry.experts.llm_experts import EXPERTS
    from kfoundry.guard.findings import POLICIES
    from kfoundry.library.store import ITEM_TYPES
    from kfoundry.logs import LEVELS
    from kfoundry.problem import PRECISIONS
    from kfoundry.search.archipelago import TOPOLOGIES
    from kfoundry.search.selection import METHODS as SELECTIONS

    assert get_args(cli_help.Precision) == tuple(PRECISIONS)
    assert get_args(cli_help.Policy) == POLICIES
    assert get_args(cli_help.Sandbox) == SANDBOX_MODES
    assert get_args(cli_help.Expert) == tuple(EXPERTS)
    assert get_args(cli_help.Topology) == TOPOLOGIES
    assert get_args(cli_help.Selection) == SELECTIONS
    assert get_args(cli_help.BenchMethod) == BENCH_METHODS
    assert get_args(cli_help.LibraryItemType) == ITEM_TYPES
    assert cli_help.BASELINES == BASELINE_NAMES
    assert get_args(cli_help.LogLevel) == LEVELS


def test_backends_are_the_ones_the_search_accepts():
    from kfoundry.errors import UsageError
    from kfoundry.optimize.settings import OptimizeSettings

    for backend in get_args(cli_help.Backend):
        OptimizeSettings(backend=backend).validate()
    with pytest.raises(UsageError):
        OptimizeSettings(backend="metal").validate()


def _complete(*words: str) -> list[str]:
    """What bash completion offers for the last word."""
    env = {**os.environ, "_KFOUNDRY_COMPLETE": "complete_bash", "COMP_WORDS": " ".join(("kfoundry",) + words),
           "COMP_CWORD": str(len(words))}
    done = subprocess.run([str(KFOUNDRY)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_choices_complete_in_a_shell():
    assert _complete("optimize", "--topology", "a") == ["all-to-all"]
    assert _complete("bench", "--method", "s") == ["solutions"]
    assert _complete("eval", "--baselines", "eager,compile-m") == ["eager,compile-max-autotune",
                                                                    "eager,compile-max-autotune-no-cudagraphs"]


def test_baselines_and_gpus_complete_item_by_item():
    assert cli_help.complete_baselines("") == list(cli_help.BASELINES)
    assert "eager,compile" in cli_help.complete_baselines("eager,c")
    assert not any(item.endswith(",eager") for item in cli_help.complete_baselines("eager,"))
    assert cli_help.complete_gpu("h2") == ["H200"]
    assert "RTX 4090" in cli_help.complete_gpu("")


def test_the_command_list_gives_each_command_its_first_paragraph_as_one_line():
    commands = dict(_commands())
    summary = commands["kfoundry diagnose"].short_help
    assert "\n" not in summary and "structured findings (what failed and where" in summary
    assert "Exit code" not in summary  # the first paragraph only

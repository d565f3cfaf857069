"""How the command line's options read in --help and complete in a shell: the options that take one
of a few names are `Literal` types (typer shows them as `<ring|all-to-all>`, completes them and
refuses others), comma-separated lists complete item by item, and a flag shows no type.

The names are written out here rather than imported from the modules that define them (the evaluator,
the search, the bench), so that `kfoundry --help` loads none of those; a test checks they agree."""

from __future__ import annotations

import inspect
from typing import Any, Literal

Precision = Literal["fp32", "fp16", "bf16"]
Policy = Literal["strict", "permissive"]
Sandbox = Literal["on", "strict", "off"]
Backend = Literal["triton", "cuda"]
Expert = Literal["initializer", "repair", "memory", "compute", "fusion", "algorithm", "crossover"]
Topology = Literal["ring", "all-to-all"]
Selection = Literal["tournament", "proportional"]
BenchMethod = Literal["optimize", "solutions", "reference"]
LibraryItemType = Literal["kernel", "insight", "step"]
LogLevel = Literal["debug", "info", "warning", "error"]

BASELINES = ("eager", "compile", "compile-max-autotune", "compile-max-autotune-no-cudagraphs",
             "compile-reduce-overhead")


def complete_baselines(incomplete: str) -> list[str]:
    """--baselines eager,comp<TAB>: the names that complete the last item, after the items given."""
    done, _, last = incomplete.rpartition(",")
    given = set(done.split(",")) if done else set()
    prefix = f"{done}," if done else ""
    return [prefix + name for name in BASELINES if name.startswith(last) and name not in given]


def complete_gpu(incomplete: str) -> list[str]:
    """--target-gpu's names as people write them (H100 PCIe, RTX 4090), which the table looks up."""
    from kfoundry.evaluate.shared.gpu_table import known_names

    short = [name.removeprefix("NVIDIA ").removeprefix("GeForce ") for name in known_names()]
    return [name for name in short if name.lower().startswith(incomplete.lower())]


def flags_show_no_type() -> None:
    """typer's rich help writes `<bool>` beside every flag (--json, --help), which takes no value:
    show nothing there, as click's plain help does."""
    try:
        from typer.core import TyperOption

        shown = TyperOption.display_type_rich
    except (ImportError, AttributeError):  # a typer without it: nothing to correct
        return
    if getattr(shown, "flags_show_no_type", False):
        return

    def display_type_rich(self, ctx):
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)

    display_type_rich.flags_show_no_type = True
    TyperOption.display_type_rich = display_type_rich


def one_line_summaries(app: Any) -> None:
    """`kfoundry --help` lists each command with its docstring's first paragraph, and typer's rich help
    keeps that paragraph's line breaks: give each command the paragraph as one line."""
    for info in app.registered_commands:
        doc = inspect.getdoc(info.callback) or ""
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.split("\n\n")[0].split())

"""The Jinja2 environment of the prompt templates (`prompts/*.j2`, shipped as package data)."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import jinja2


def fenced(text: str, tag: str = "python") -> str:
    """`text` in a code fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{tag}\n{text.strip(chr(10))}\n{fence}"


def number(value: float | None, unit: str = "", digits: int = 4) -> str:
    if value is None:
        return "not measured"
    return f"{value:.{digits}g}{unit}"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    folder = resources.files("kfoundry.experts") / "prompts"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["fenced"] = fenced
    env.filters["number"] = number
    return env


def tidy(text: str) -> str:
    """At most one blank line in a row, except inside code fences (sources are shown verbatim)."""
    out: list[str] = []
    fence = ""
    for line in text.split("\n"):
        mark = re.match(r"^\s*(`{3,})", line)
        if fence and mark and line.strip() == mark.group(1) and len(mark.group(1)) >= len(fence):
            fence = ""
        elif not fence and mark:
            fence = mark.group(1)
        elif not fence and not line.strip() and out and not out[-1].strip():
            continue
        out.append(line)
    return "\n".join(out).strip() + "\n"


def render_template(name: str, **variables) -> str:
    return tidy(environment().get_template(name).render(**variables))

"""HTML pieces shared by the run report and the bench page: the Jinja environment of the page
templates (`report_assets/`), syntax-highlighted code and diffs (pygments), number formats."""

from __future__ import annotations

import base64
import difflib
import hashlib
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

CODE_CLASS = "code"


def number(value: Any, digits: int = 3, unit: str = "", missing: str = "-") -> str:
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}g}{unit}"
    return f"{value}{unit}"


def percent(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.0%}"


def usd(value: float | None, missing: str = "unknown") -> str:
    return missing if value is None else f"${value:.4f}"


def tokens(value: int | None, unknown_calls: int = 0) -> str:
    """A token count; 'unknown' where replies came without counts (with '+ ?' beside a partial sum)."""
    if value is None:
        return "unknown" if unknown_calls else "-"
    return f"{value:,}" + (" + ?" if unknown_calls else "")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _formatter(linenos: bool) -> HtmlFormatter:
    return HtmlFormatter(cssclass=CODE_CLASS, linenos="table" if linenos else False, wrapcode=True)


def code_html(source: str) -> Markup:
    """Python source, highlighted (classes styled by `code_css`)."""
    return Markup(highlight(source, PythonLexer(), _formatter(linenos=True)))


def diff_text(before: str, after: str, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=before_name, tofile=after_name, n=3))


def diff_html(text: str) -> Markup:
    return Markup(highlight(text, DiffLexer(), _formatter(linenos=False)))


@lru_cache(maxsize=1)
def code_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(f".{CODE_CLASS}")


def asset(name: str) -> str:
    return (resources.files("kfoundry.runs") / "report_assets" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    folder = resources.files("kfoundry.runs") / "report_assets"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(number=number, percent=percent, usd=usd, tokens=tokens, duration=duration)
    return env


# The pages' Content-Security-Policy: nothing is fetched (default-src 'none'), images only as data: URIs,
# and only the page's own inline scripts run, each named by its sha256 hash (no 'unsafe-inline' for
# scripts: an injected <script> or on* attribute would not run). Inline styles stay allowed.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src {scripts}"


def script_hash(body: str) -> str:
    """The CSP source of an inline script: 'sha256-...' of the exact text between <script> and </script>."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii") + "'"


def render_page(template: str, scripts: tuple[str, ...] = (), **context: Any) -> str:
    """A whole page: the template with the shared stylesheet inlined, and the check script plus `scripts`
    (names of report_assets/ files) inlined, each allowed by its hash in the page's CSP."""
    bodies = [f"\n{asset(name)}\n" for name in ("checks.js", *scripts)]
    csp = CSP.format(scripts=" ".join(script_hash(body) for body in bodies))
    return environment().get_template(template).render(
        style=Markup(asset("style.css") + "\n" + code_css()), scripts=[Markup(body) for body in bodies],
        csp=Markup(csp), **context)

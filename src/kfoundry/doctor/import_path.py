"""Whether kfoundry's workers can read their import path, checked from the parent: each entry must be
readable by this user and granted by the candidates' sandbox (kfoundry.sandbox.policy). An entry they cannot
read is a risk (a candidate or a problem importing from it fails); it is certain failure when it holds a
package every worker imports as it starts (torch, Triton, kfoundry's own dependencies) and no readable entry
holds another copy."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from kfoundry.doctor.check import Check, passed, problem
from kfoundry.paths import inside

# what a worker loads before any job's code: the sandbox's entry point, the worker, the jobs' modules
WORKER_MODULES = ("kfoundry.sandbox.start", "kfoundry.evaluate.worker.entry", "kfoundry.evaluate.worker.candidate_job",
                  "kfoundry.evaluate.reference.judge_job", "kfoundry.evaluate.reference.baseline_job")
NAME = "import path"


def import_path() -> list[str]:
    """The parent's import path as a worker gets it: existing folders, not the working directory (which
    only `python -m` puts on ours, and a worker never runs from), nor the folders of problems this process
    loaded (each goes to its own problem's workers alone)."""
    from kfoundry import problem

    cwd = os.path.realpath(os.getcwd())
    problems = {os.path.realpath(p) for p in getattr(problem, "problem_folders", frozenset)()}
    entries = []
    for entry in sys.path:
        if entry and os.path.isdir(entry) and os.path.realpath(entry) not in problems | {cwd}:
            entries.append(entry)
    return list(dict.fromkeys(entries))


def _package_root() -> Path:
    import kfoundry

    return Path(kfoundry.__file__).resolve().parent.parent


def _module_file(name: str) -> Path | None:
    base = _package_root() / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _top_level_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """What runs when the module is imported: its statements, inside if/try/with, not inside functions or
    classes, and not under `if TYPE_CHECKING:`."""
    for node in body:
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                yield from _top_level_statements(node.body)
            yield from _top_level_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for part in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _top_level_statements(part)
        elif isinstance(node, ast.With):
            yield from _top_level_statements(node.body)
        else:
            yield node


@lru_cache(maxsize=1)
def worker_packages() -> frozenset[str]:
    """The top-level packages, other than kfoundry and the standard library, that kfoundry's worker modules
    import as they load, read from their source (nothing is imported to find them)."""
    found: set[str] = set()
    todo, seen = list(WORKER_MODULES), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # a package's __init__ runs first
        path = _module_file(name)
        if path is None:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in _top_level_statements(tree.body):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for imported in names:
                top = imported.split(".")[0]
                if top == "kfoundry":
                    todo.append(imported)
                elif top and top not in sys.stdlib_module_names:
                    found.add(top)
    return frozenset(found)


def _under(path: str, roots: Iterable[str]) -> bool:
    """Inside one of `roots`; a root ending in a separator (a folder granted entry by entry) holds only itself."""
    roots = list(roots)
    whole = [root for root in roots if not root.endswith(os.sep)]
    itself = [os.path.realpath(root) for root in roots if root.endswith(os.sep)]
    return inside(path, whole) or os.path.realpath(path) in itself


def sandbox_reads(entries: list[str]) -> list[str] | None:
    """The paths the candidates' sandbox lets a worker read, as kfoundry.sandbox.policy grants them for this
    import path (a folder with something private in it is granted entry by entry: it counts itself, and
    its entries but the private ones); None where the rules cannot be computed here."""
    try:
        from kfoundry.sandbox import policy

        workdir = Path(tempfile.gettempdir()) / "kfoundry-doctor-rules"
        rules = policy.worker_rules(workdir, gpu=False, import_path=entries)
        return list(rules.read) + [os.path.join(folder, "") for folder in rules.listing]
    except Exception:  # noqa: BLE001 -- the OS-level check still stands
        return None


def unreadable_reason(path: str, reads: list[str] | None) -> str | None:
    """Why a worker cannot read `path` (a folder or a package in it), or None."""
    if not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
        return "not readable by this user"
    if reads is not None and not _under(path, reads):
        return "outside what the candidates' sandbox lets a worker read"
    return None


def _copies(package: str, entries: list[str]) -> list[str]:
    """The entries that hold a package or module of this name."""
    found = []
    for entry in entries:
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        if package in names or any(n.split(".")[0] == package and n.endswith((".py", ".so", ".pyd"))
                                   for n in names):
            found.append(entry)
    return found


def _location(package: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations), None)
    return spec.origin if spec.origin not in (None, "built-in", "frozen") else None


def check_import_path(sandbox: str = "on", entries: list[str] | None = None) -> Check:
    """One line: every entry readable by a worker, or which are not and what that breaks."""
    entries = import_path() if entries is None else entries
    reads = sandbox_reads(entries) if sandbox != "off" else None
    blocked = {entry: why for entry in entries if (why := unreadable_reason(entry, reads))}
    readable = [e for e in entries if e not in blocked]
    certain = []
    for package in sorted(worker_packages() | {"torch"}):
        where = _location(package)
        if where is None:
            continue
        why = unreadable_reason(where, reads)
        if why and not any(unreadable_reason(os.path.join(e, package), reads) is None
                           for e in _copies(package, readable)):
            certain.append(f"{package} ({where}: {why})")
    if certain:
        return problem(NAME, "a worker cannot import what it needs to start: " + "; ".join(certain),
                       "install those packages into this Python environment (pip install ...), or make their "
                       "folders readable to kfoundry's workers", fatal=True)
    if blocked:
        listed = "; ".join(f"{entry} ({why})" for entry, why in blocked.items())
        return problem(NAME, f"{len(blocked)} of {len(entries)} entries cannot be read by a worker: {listed}; "
                             "a problem or a candidate that imports from them will fail",
                       "make them readable to kfoundry's workers, or install what they hold into this Python "
                       "environment")
    where = "by this user and inside the candidates' sandbox" if reads is not None else "by this user"
    return passed(NAME, f"all {len(entries)} entries readable {where}")

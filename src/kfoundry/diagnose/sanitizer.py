"""compute-sanitizer memcheck: the command prefix a re-run goes under, its log parsed, and findings
that name the first bad access and, for a Triton kernel, its loads and stores without masks.

A memcheck log (every line starts with "========="):

    ========= Invalid __global__ read of size 4 bytes
    =========     at _oob_kernel+0x1d0 in /path/candidate.py:14
    =========     by thread (96,0,0) in block (3,0,0)
    =========     Access to 0x7f3a2c000fa0 is out of bounds
    =========     and is 1 bytes after the nearest allocation at 0x7f3a2c000000 of size 4,000 bytes
    ...
    ========= ERROR SUMMARY: 24 errors

Older versions write "Address 0x... is out of bounds" and "at 0x1d0 in file:line:kernel".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from kfoundry import source_ast
from kfoundry.types import DiagnosticFinding, SourceLocation

PREFIX = "========="
KIND = re.compile(r"^(?P<kind>(?:Invalid|Misaligned|Uninitialized|Out-of-range)\b.*?)"
                  r"(?: of size (?P<size>[\d,]+)(?: bytes?)?)?$")
AT_NEW = re.compile(r"^at (?P<function>.+?)\+(?P<pc>0x[0-9a-fA-F]+)(?: in (?P<file>.+?):(?P<line>\d+))?$")
AT_OLD = re.compile(r"^at (?P<pc>0x[0-9a-fA-F]+) in (?:(?P<file>.+?):(?P<line>\d+):)?(?P<function>.+)$")
IN_FILE = re.compile(r"^in (?P<file>.+?):(?P<line>\d+)$")
THREAD = re.compile(r"by thread \((?P<thread>[^)]*)\) in block \((?P<block>[^)]*)\)")
ADDRESS = re.compile(r"^(?:Address|Access to|Access at) (?P<address>0x[0-9a-fA-F]+) (?P<detail>.+)$")
SUMMARY = re.compile(r"ERROR SUMMARY: (?P<count>[\d,]+) errors?")
OTHER_TOP = ("Program hit", "Target application", "LEAK SUMMARY", "COMPUTE-SANITIZER", "Saved host", "Host Frame",
             "Device Frame")


def sanitizer_command(log_path: str | Path, executable: str = "compute-sanitizer") -> list[str]:
    """The wrapper prefix for the worker's command line (the worker's python follows it)."""
    return [executable, "--tool", "memcheck", "--print-limit", "20", "--log-file", str(log_path)]


def kernel_identifier(function: str | None) -> str | None:
    """`void ns::add<float>(const float *, int)` -> `add`; a Triton kernel's name stays as it is."""
    if not function:
        return None
    head = function.split("(", 1)[0].strip()
    head = re.sub(r"<.*>$", "", head).strip()
    head = head.split()[-1] if head.split() else head
    return head.rsplit("::", 1)[-1] or None


def parse_memcheck(text: str) -> dict[str, Any]:
    """{"errors": [{"kind", "size", "kernel", "function", "pc offset", "file", "line", "thread", "block",
    "address", "detail"}], "api_errors": [...], "summary": "ERROR SUMMARY: N errors", "error_count": N,
    "unprinted": how many of them the print limit left out}."""
    errors: list[dict[str, Any]] = []
    api_errors: list[str] = []
    summary, count, unprinted = None, None, 0
    current: dict[str, Any] | None = None
    in_backtrace = False
    for raw in text.splitlines():
        if not raw.startswith(PREFIX):
            continue
        line = raw[len(PREFIX):].strip()
        if not line:
            current, in_backtrace = None, False
            continue
        found = SUMMARY.search(line)
        if found:
            if "not printed" in line:  # "ERROR SUMMARY: N errors were not printed" follows the real summary
                unprinted = int(found.group("count").replace(",", ""))
            else:
                summary, count = line, int(found.group("count").replace(",", ""))
            current = None
            continue
        kind = KIND.match(line)
        if kind:
            size = kind.group("size")
            current = {"kind": kind.group("kind").strip(), "size": int(size.replace(",", "")) if size else None,
                       "kernel": None, "function": None, "pc offset": None, "file": None, "line": None,
                       "thread": None, "block": None, "address": None, "detail": None}
            errors.append(current)
            in_backtrace = False
            continue
        if line.startswith("Program hit"):
            api_errors.append(line)
            current = None
            continue
        if line.startswith(OTHER_TOP):
            in_backtrace = line.startswith(("Saved host", "Host Frame", "Device Frame")) or in_backtrace
            continue
        if current is None or in_backtrace:
            continue
        _detail_line(current, line)
    return {"errors": errors, "api_errors": api_errors, "summary": summary, "error_count": count,
            "unprinted": unprinted}


def _detail_line(error: dict[str, Any], line: str) -> None:
    at = AT_NEW.match(line) or AT_OLD.match(line) if line.startswith("at ") else None
    if at and error["function"] is None:
        error["function"] = at.group("function").strip()
        error["kernel"] = kernel_identifier(error["function"])
        error["pc offset"] = at.group("pc")
        if at.group("file"):
            error["file"], error["line"] = at.group("file"), int(at.group("line"))
        return
    found = IN_FILE.match(line)
    if found and error["file"] is None:
        error["file"], error["line"] = found.group("file"), int(found.group("line"))
        return
    found = THREAD.search(line)
    if found:
        error["thread"], error["block"] = f"({found.group('thread')})", f"({found.group('block')})"
        return
    found = ADDRESS.match(line)
    if found:
        error["address"], error["detail"] = found.group("address"), found.group("detail")
        return
    if error["detail"] is not None and (line.startswith("and ") or line.startswith("of size")):
        error["detail"] += " " + line  # "and is 4 bytes after the nearest allocation at ... of size ..."


# -- where in a Triton kernel ----------------------------------------------------------------------
def _is_access(node: ast.Call, name: str) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and func.attr == name or isinstance(func, ast.Name) and func.id == name


def unmasked_accesses(source: str, kernel: str) -> list[dict[str, Any]]:
    """tl.load / tl.store calls without a mask (or boundary_check) in the function named `kernel`."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef) and node.name == kernel):
            continue
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            for op, mask_position in (("load", 1), ("store", 2)):
                if not _is_access(call, op):
                    continue
                keywords = {k.arg for k in call.keywords}
                if {"mask", "boundary_check"} & keywords or len(call.args) > mask_position:
                    continue
                out.append({"op": op, "line": call.lineno, "column": call.col_offset + 1,
                            "text": lines[call.lineno - 1].strip() if call.lineno <= len(lines) else ""})
    return sorted(out, key=lambda a: (a["line"], a["column"]))


def _location(first: dict[str, Any], source: str | None, file: str | None,
              accesses: list[dict[str, Any]]) -> SourceLocation | None:
    """The reported line when it is in the candidate, else the unmasked access of the same kind
    (read: load, write: store), else the CUDA kernel's declaration in the candidate."""
    kernel = first.get("kernel")
    lines = source.splitlines() if source else []
    triton_kernel = bool(source and kernel and re.search(rf"^\s*def\s+{re.escape(kernel)}\s*\(", source, re.M))
    reported = first.get("file")
    if triton_kernel and first.get("line") and reported and reported.endswith(".py") and (
            file is None or Path(reported).name == Path(file).name) and first["line"] <= len(lines):
        column = next((a["column"] for a in accesses if a["line"] == first["line"]), None)
        return SourceLocation(file=file or reported, line=first["line"], column=column,
                              text=lines[first["line"] - 1].strip(), function=kernel)
    if accesses:
        wanted = "store" if " write" in first["kind"] else "load"
        picked = next((a for a in accesses if a["op"] == wanted), accesses[0])
        return SourceLocation(file=file, line=picked["line"], column=picked["column"], text=picked["text"],
                              function=kernel)
    for number, line in enumerate(lines, start=1):
        if kernel and re.search(rf"__global__\s+.*\b{re.escape(kernel)}\s*\(", line):
            return SourceLocation(file=file, line=number, text=line.strip(), function=kernel)
    if first.get("line"):
        return SourceLocation(file=reported, line=first["line"], function=kernel)
    return None


def sanitizer_findings(report: dict[str, Any], source: str | None = None,
                       file: str | None = None) -> list[DiagnosticFinding]:
    """The first bad access (kernel, thread, address, how far out), pointing at unmasked loads or
    stores when the kernel is a Triton kernel of `source`; a clean run says so."""
    errors = report.get("errors") or []
    count = report.get("error_count")
    if not errors:
        if count == 0 or (report.get("summary") and not report.get("api_errors")):
            return [DiagnosticFinding("sanitizer", "info", "compute-sanitizer memcheck: no errors",
                                      [report.get("summary") or "ERROR SUMMARY: 0 errors"])]
        if report.get("api_errors"):
            return [DiagnosticFinding("sanitizer", "error", f"compute-sanitizer: {report['api_errors'][0][:200]}",
                                      report["api_errors"][:5])]
        return []
    first = errors[0]
    kernel = first.get("kernel") or "?"
    title = f"{first['kind']}" + (f" of {first['size']} bytes" if first.get("size") else "") + f" in {kernel}"
    evidence = [f"by thread {first.get('thread')} in block {first.get('block')}" if first.get("thread") else "",
                f"address {first['address']} {first.get('detail') or ''}".strip() if first.get("address") else "",
                f"at {first['function']}+{first['pc offset']}" if first.get("function") else "",
                report.get("summary") or f"{len(errors)} error(s) printed"]
    kinds = sorted({e["kind"] for e in errors})
    if len(kinds) > 1:
        evidence.append("kinds: " + "; ".join(kinds))
    evidence += report.get("api_errors", [])[:2]
    kernel_name = first.get("kernel")
    accesses = unmasked_accesses(source, kernel_name) if source and kernel_name else []
    location = _location(first, source, file, accesses)
    if first.get("file") and first.get("line"):
        evidence.append(f"reported at {first['file']}:{first['line']}")
    if accesses:
        evidence.append("without a mask in " + kernel_name + ": "
                        + "; ".join(f"line {a['line']}: {a['text']}" for a in accesses))
    direction = ("mask every tl.load/tl.store that can run past the end (mask=offs < n, other=0.0 for loads)"
                 if accesses else "check the index math and the bounds guard of the kernel's loads and stores")
    return [DiagnosticFinding("sanitizer", "error", title, [e for e in evidence if e], location=location,
                              direction=direction,
                              data={"errors": errors[:5], "error_count": count, "unmasked": accesses})]

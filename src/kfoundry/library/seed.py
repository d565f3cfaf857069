"""The curated seed shipped with the package: reference Triton kernels with notes, and general insights.

Each seed kernel is a folder under seed/ with problem.py (a reference in KernelBench form),
kernel.py (its ModelNew) and note.md. Their signatures are computed once, on the meta device at full
size, into seed/manifest.json (`python -m kfoundry.library.seed` rebuilds it), so opening a library
never imports torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SEED_DIR = Path(__file__).resolve().parent / "seed"
MANIFEST = SEED_DIR / "manifest.json"
INSIGHTS = SEED_DIR / "insights.json"
# Bump when the seed content changes: libraries opened later pick the new items up.
SEED_VERSION = 1


def kernel_dirs() -> list[Path]:
    return sorted(p for p in SEED_DIR.iterdir() if p.is_dir() and (p / "kernel.py").is_file())


def _title(note: str, fallback: str) -> str:
    for line in note.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def build_manifest() -> list[dict[str, Any]]:
    from kfoundry.problem_signature import signature

    entries = []
    for folder in kernel_dirs():
        sig = signature(folder / "problem.py", device="meta")
        sig.pop("set", None)
        entries.append({"slug": folder.name, "signature": sig})
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return entries


def seed_kernels() -> list[dict[str, Any]]:
    """The seed kernels as add_kernel arguments (with their slug)."""
    signatures = {e["slug"]: e["signature"] for e in json.loads(MANIFEST.read_text(encoding="utf-8"))}
    items = []
    for folder in kernel_dirs():
        note = (folder / "note.md").read_text(encoding="utf-8")
        items.append({
            "slug": folder.name,
            "title": _title(note, folder.name),
            "signature": signatures.get(folder.name, {}),
            "source": (folder / "kernel.py").read_text(encoding="utf-8"),
            "notes": note,
        })
    return items


def seed_insights() -> list[dict[str, Any]]:
    from kfoundry.problem_signature import signature_text

    items = []
    for entry in json.loads(INSIGHTS.read_text(encoding="utf-8")):
        sig = {"kind": entry["kind"], "ops": [], "compute_ops": []}
        sig["text"] = signature_text(sig)
        items.append({"slug": entry["slug"], "text": entry["text"], "signature": sig})
    return items


if __name__ == "__main__":
    for entry in build_manifest():
        print(entry["slug"], entry["signature"]["kind"], " ".join(entry["signature"]["ops"]))

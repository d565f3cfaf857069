"""One line of `kfoundry doctor`: what holds, or the problem and its fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # certain to fail every evaluation (not merely a risk): optimize and bench stop before their first candidate
    fatal: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        head = f"{'ok' if self.ok else 'problem':<8} {self.name}: {self.detail}"
        return head if self.ok or not self.fix else f"{head}\n{'':<8} fix: {self.fix}"


def passed(name: str, detail: str) -> Check:
    return Check(name, True, detail)


def problem(name: str, detail: str, fix: str, fatal: bool = False) -> Check:
    return Check(name, False, detail, fix, fatal)

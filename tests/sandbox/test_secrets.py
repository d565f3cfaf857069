"""Secret values are scrubbed from what a candidate's worker sent back."""

from dataclasses import dataclass, field

from kfoundry.redact import MASK
from kfoundry.sandbox import secrets


@dataclass
class Record:
    message: str
    notes: list = field(default_factory=list)
    error: dict | None = None


@dataclass(frozen=True)
class Frozen:
    text: str
    ratio: float = 0.5


def test_known_secrets_come_from_the_environment_and_the_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("SHORT_TOKEN", "1")  # too short to be told from ordinary text
    secrets.register("sk-from-kfoundry-toml")
    values = secrets.known()
    assert "sk-from-the-environment" in values and "sk-from-kfoundry-toml" in values and "1" not in values


def test_scrub_tree_reaches_every_string(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    record = Record("found sk-ant-secret-value!", ["x sk-ant-secret-value y"],
                    {"traceback": ["line", ("sk-ant-secret-value", 3)], "file": "/w/copy.py:3"})
    secrets.scrub_tree(record, rewrite={"/w/copy.py": "/home/me/kernel.py"})
    assert record.message == f"found {MASK}!" and record.notes == [f"x {MASK} y"]
    assert record.error == {"traceback": ["line", (MASK, 3)], "file": "/home/me/kernel.py:3"}
    assert secrets.scrub("nothing here", values=[]) == "nothing here"
    frozen = Record("ok", [Frozen("sk-ant-secret-value"), Frozen("plain")])
    secrets.scrub_tree(frozen)  # a frozen record inside is scrubbed too, not a crash
    assert frozen.notes == [Frozen(MASK), Frozen("plain")]

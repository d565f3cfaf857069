"""kfoundry.experts.llm_step: one call, charged to the budget and parsed; every failure is a reason."""

import sys

from kfoundry.experts.llm_step import ask, prompt_hash
from kfoundry.llm import make_provider

KERNEL = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def _replying(tmp_path, text):
    script = tmp_path / "reply.py"
    script.write_text(f"import sys\nsys.stdin.read()\nprint({text!r})\n")
    return make_provider(f"cmd:{sys.executable} {script}")


class Budget:
    def __init__(self, exhausted=False):
        self.exhausted, self.charged = exhausted, []

    def charge(self, reply):
        self.charged.append(reply)


def test_a_reply_with_a_kernel_gives_its_source_and_is_charged(tmp_path):
    budget = Budget()
    step = ask(_replying(tmp_path, f"```python\n{KERNEL}```"), budget, "system", "user", None)
    assert step.called and step.source.strip() == KERNEL.strip() and step.failure is None
    assert step.reply_kind == "file" and len(budget.charged) == 1
    assert step.prompt_hash == prompt_hash("system", "user")
    record = step.record("memory")
    assert record["expert"] == "memory" and record["reply"]["text"] and record["failure"] is None


def test_a_reply_without_code_a_failed_call_and_a_spent_budget_are_reasons(tmp_path):
    prose = ask(_replying(tmp_path, "I cannot help with that."), None, "s", "u", None)
    assert prose.called and prose.source is None and prose.failure and prose.reply is not None
    broken = make_provider(f"cmd:{sys.executable} -c 'import sys; sys.exit(3)'")
    failed = ask(broken, None, "s", "u", None)
    assert failed.called and failed.source is None and failed.failure.startswith("LLM call failed")
    spent = ask(broken, Budget(exhausted=True), "s", "u", None)
    assert not spent.called and spent.failure == "the LLM budget is spent"

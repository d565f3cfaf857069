"""kfoundry.redact: API keys masked in what we print, log, record or raise. A leaf shared by the LLM providers
and the evaluation processes (kfoundry.sandbox.secrets), which must not load the LLM stack to use it."""

import json
import subprocess
import sys

from kfoundry.redact import MASK, Redactor, scrub_url


def test_given_secrets_and_key_shapes_are_masked():
    redact = Redactor(["hunter2-long-secret", None, "abc"])  # "abc": too short to be told from text
    text = redact("pw hunter2-long-secret, key sk-proj-ABCDEFGH1234, Authorization: Bearer tok.en-1234567 abc")
    assert text == f"pw {MASK}, key {MASK}, Authorization: Bearer {MASK} abc"


def test_scrub_url_drops_the_user_and_key_parameters():
    assert scrub_url("https://user:pw@host.example/v1?token=abc&model=x") == "https://host.example/v1?token=***&model=x"


def test_the_llm_package_still_gives_the_same_names():
    from kfoundry.llm import redact

    assert (redact.MASK, redact.Redactor, redact.scrub_url) == (MASK, Redactor, scrub_url)


def test_scrubbing_and_the_llm_settings_load_no_provider():
    """What the evaluation processes and the configuration use of these: no SDK, no retries, no provider."""
    code = ("import json, sys, kfoundry.sandbox.secrets, kfoundry.llm.settings, kfoundry.llm.cost_text;"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('kfoundry.llm', 'tenacity', 'openai', "
            "'anthropic')))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["kfoundry.llm", "kfoundry.llm.cost_text", "kfoundry.llm.settings"]


def test_the_llm_package_names_load_on_first_use():
    code = ("import sys, kfoundry.llm as llm; assert 'tenacity' not in sys.modules;"
            "from kfoundry.llm import make_provider, LLMError, anthropic_provider;"
            "assert llm.RetryPolicy.__module__ == 'kfoundry.llm.retry' and 'tenacity' in sys.modules;"
            "assert set(llm.__all__) <= set(dir(llm))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr

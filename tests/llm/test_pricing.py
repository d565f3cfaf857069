"""Shipped and user prices; unknown means None, and local servers are free only if the user says so."""

from __future__ import annotations

import pytest

from kfoundry.errors import UsageError
from kfoundry.llm import Price, Pricing

LOCAL = "http://127.0.0.1:8000/v1"


@pytest.fixture(scope="module")
def shipped() -> Pricing:
    return Pricing.load(None)


def test_shipped_table_is_dated_and_covers_common_models(shipped):
    assert shipped.taken
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "o3", "claude-sonnet-4", "claude-opus-4-1"):
        price = shipped.price(model)
        assert price is not None and 0 < price.input_per_mtok <= price.output_per_mtok


def test_cost_and_snapshots(shipped):
    assert shipped.cost("gpt-4o", 1_000_000, 1_000_000) == pytest.approx(12.50)
    assert shipped.cost("gpt-4o-2024-08-06", 2000, 1000) == pytest.approx((2000 * 2.5 + 1000 * 10) / 1e6)
    assert shipped.cost("claude-sonnet-4-20250514", 1000, 0) == pytest.approx(0.003)
    assert shipped.price("gpt-4o-mini") != shipped.price("gpt-4o")
    assert shipped.cost("gpt-4o", 0, 0) == 0.0


def test_unknown_model_is_unknown_not_free(shipped):
    assert shipped.cost("some-new-model", 100, 100) is None


def test_custom_servers_use_only_user_prices(shipped):
    assert shipped.cost("gpt-4o", 100, 100, base_url=LOCAL) is None
    assert shipped.cost("gpt-4o", 100, 100, base_url="https://openrouter.ai/api/v1") is None
    # The vendor's own URL written out is still the vendor.
    assert shipped.cost("gpt-4o", 1_000_000, 0, base_url="https://api.openai.com/v1") == pytest.approx(2.5)


def test_user_file_overrides_and_prices_servers(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text(f'''
[models]
"gpt-4o" = {{ input = 1.0, output = 2.0 }}
"qwen-coder" = {{ input = 0.1, output = 0.2 }}
"*@{LOCAL}/" = {{ input = 0, output = 0 }}
"deepseek-chat@https://api.deepseek.com" = {{ input = 0.27, output = 1.1 }}
''')
    pricing = Pricing.load(path)
    assert pricing.price("gpt-4o") == Price(1.0, 2.0)
    assert pricing.price("claude-sonnet-4") == Price(3.0, 15.0)  # shipped still there
    assert pricing.price("qwen-coder", "http://elsewhere:9000/v1") == Price(0.1, 0.2)
    assert pricing.cost("anything", 10**6, 10**6, base_url=LOCAL) == 0.0
    assert pricing.cost("deepseek-chat", 10**6, 0, base_url="https://api.deepseek.com/") == pytest.approx(0.27)
    assert pricing.cost("other", 1, 1, base_url="https://api.deepseek.com") is None


@pytest.mark.parametrize("content, match", [
    ("[models\n", "not valid TOML"),
    ('[models]\n"m" = { input = 1 }\n', "needs exactly input and output"),
    ('[models]\n"m" = { input = -1, output = 1 }\n', "numbers >= 0"),
    ('models = 3\n', r"\[models\] must be a table"),
])
def test_bad_user_files(tmp_path, content, match):
    path = tmp_path / "p.toml"
    path.write_text(content)
    with pytest.raises(UsageError, match=match):
        Pricing.load(path)


def test_missing_user_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read the pricing file"):
        Pricing.load(tmp_path / "absent.toml")

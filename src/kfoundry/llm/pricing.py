"""Model prices (USD per million tokens): the shipped table, extended by the user's own file."""

from __future__ import annotations

import importlib.resources
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kfoundry.errors import UsageError

# The vendors' own endpoints: the shipped list prices apply there. Any other base URL (a local
# vLLM, OpenRouter, DeepSeek, ...) is priced only by the user's file.
VENDOR_HOSTS = ("api.openai.com", "api.anthropic.com")
_MODEL_AT_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


def _parse(data: dict[str, Any], where: str) -> dict[str, Price]:
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise UsageError(f"{where}: [models] must be a table of model = {{ input = ..., output = ... }}")
    prices = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or set(entry) - {"input", "output"} or len(entry) != 2:
            raise UsageError(f"{where}: models.{name!r} needs exactly input and output "
                             "(USD per million tokens)")
        values = [entry["input"], entry["output"]]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                   for v in values):
            raise UsageError(f"{where}: models.{name!r}: prices must be numbers >= 0")
        prices[name] = Price(float(values[0]), float(values[1]))
    return prices


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the pricing file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"the pricing file {path} is not valid TOML: {exc}") from None


def _normal_url(url: str) -> str:
    return url.rstrip("/")


def _normal_key(key: str) -> str:
    """ "M@http://host/v1/" and "M@http://host/v1" are the same entry."""
    match = _MODEL_AT_URL.match(key)
    return f"{match['model']}@{_normal_url(match['url'])}" if match else key


class Pricing:
    """Prices by model name. User entries override shipped ones. For a provider with a base URL
    other than the vendor's, only user entries count, looked up as "MODEL@BASE_URL", then
    "*@BASE_URL" (everything that server serves), then "MODEL"."""

    def __init__(self, shipped: dict[str, Price], user: dict[str, Price] | None = None,
                 taken: str | None = None) -> None:
        self.shipped = dict(shipped)
        self.user = {_normal_key(k): v for k, v in (user or {}).items()}
        self.taken = taken  # when the shipped prices were taken

    @classmethod
    def load(cls, user_path: Path | None = None) -> Pricing:
        text = importlib.resources.files("kfoundry").joinpath("data/pricing.toml").read_text("utf-8")
        data = tomllib.loads(text)
        shipped = _parse(data, "the shipped pricing.toml")
        user = _parse(_read(Path(user_path)), f"the pricing file {user_path}") if user_path else {}
        return cls(shipped, user, taken=data.get("taken"))

    def price(self, model: str, base_url: str | None = None) -> Price | None:
        names = [model]
        bare = _SNAPSHOT.sub("", model)
        if bare != model:
            names.append(bare)
        if base_url is not None and urlsplit(base_url).hostname not in VENDOR_HOSTS:
            url = _normal_url(base_url)
            for key in (*(f"{n}@{url}" for n in names), f"*@{url}", *names):
                if key in self.user:
                    return self.user[key]
            return None
        for name in names:
            for table in (self.user, self.shipped):
                if name in table:
                    return table[name]
        return None

    def cost(self, model: str, input_tokens: int, output_tokens: int, *,
             base_url: str | None = None) -> float | None:
        """USD, or None when the model has no price (unknown, not free)."""
        price = self.price(model, base_url)
        return None if price is None else price.cost(input_tokens, output_tokens)

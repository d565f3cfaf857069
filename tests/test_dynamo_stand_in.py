"""kfoundry.dynamo_stand_in: a problem sized on the meta device without importing torch._dynamo, the same sizes as
with it, and torch's own behaviour back once the context is closed. Each check runs in a fresh interpreter: a
test process has imported torch._dynamo long before."""

import json
import subprocess
import sys

PROBLEM = '''
import torch
from torch import nn

batch_size = 8
features = 64


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return torch.softmax(self.norm(self.linear(x)), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''

SIZES = '''
import dataclasses, json, sys
import torch
if sys.argv[2] == "dynamo first":
    import torch._dynamo
from kfoundry.evaluate.parent.memory_plan import problem_sizes
from kfoundry.problem import read_problem

sizes = problem_sizes(read_problem(sys.argv[1]), "fp32", False)
print(json.dumps({"sizes": dataclasses.asdict(sizes), "dynamo": "torch._dynamo" in sys.modules}))
'''

AFTER = '''
import json, sys
import torch
from kfoundry.dynamo_stand_in import CACHED, no_dynamo_import

facts = {}
with torch.device("meta"):
    layer, x = torch.nn.Linear(8, 2), torch.randn(4, 8)
with no_dynamo_import(), torch.device("meta"):
    import torch._dynamo as inside
    facts["shape"] = list(layer(x).shape)  # through meta kernels that torch._disable_dynamo wraps
    given = list(inside.given)
    held = inside.disable(lambda: "ran")  # a wrapper a thread might still hold when the context closes
facts["imported_inside"] = "torch._dynamo" in sys.modules
facts["wrapped_inside"] = len(given)
facts["left_on_functions"] = sum(getattr(fn, CACHED, None) is call for fn, call in given)
with torch.device("meta"):
    layer(x)  # outside: torch's own wrapper imports the real module
facts["imported_after"] = type(sys.modules.get("torch._dynamo")).__name__
facts["held"] = held()
with no_dynamo_import():  # imported already: nothing to stand in for
    facts["real_inside"] = type(sys.modules["torch._dynamo"]).__name__
print(json.dumps(facts))
'''

OTHER_ATTRIBUTES = '''
import json, sys
import torch
from kfoundry.dynamo_stand_in import CACHED, no_dynamo_import

def fn():
    return "ran"

with no_dynamo_import():
    import torch._dynamo as early
    held = early.disable(fn)
    compiling = torch._dynamo.is_compiling()  # any attribute but disable: the real module, imported now
    from torch._dynamo import config
    real = type(sys.modules["torch._dynamo"]).__name__
    ran = held()  # given before the real module came: it hands over to the real disable at once
    handed = getattr(fn, CACHED, None) not in (None, held)
    shape = list(torch.softmax(torch.empty(3, 5, device="meta"), dim=-1).shape)
print(json.dumps({"compiling": compiling, "config": config.__name__, "real": real, "ran": ran, "handed": handed,
                  "shape": shape}))
'''


def _run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_problem_is_sized_on_meta_without_torch_dynamo_and_to_the_same_sizes(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM)
    without = _run(SIZES, str(problem), "plain")
    with_dynamo = _run(SIZES, str(problem), "dynamo first")
    assert without["dynamo"] is False and with_dynamo["dynamo"] is True
    assert without["sizes"] == with_dynamo["sizes"] and without["sizes"]["forward_bytes"] > 0


def test_outside_the_context_torch_wraps_and_imports_as_it_always_did():
    facts = _run(AFTER)
    assert facts["shape"] == [4, 2] and not facts["imported_inside"]
    assert facts["wrapped_inside"] > 0 and facts["left_on_functions"] == 0  # no stand-in wrapper kept
    assert facts["imported_after"] == "module"  # the real torch._dynamo, imported by torch's wrapper
    assert facts["held"] == "ran"  # a wrapper still held hands over to the real disable
    assert facts["real_inside"] == "module"


def test_inside_the_context_every_other_attribute_is_the_real_modules():
    facts = _run(OTHER_ATTRIBUTES)
    assert facts == {"compiling": False, "config": "torch._dynamo.config", "real": "module", "ran": "ran",
                     "handed": True, "shape": [3, 5]}

COMPOSED = '''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.experts.composer.test_golden import ROOT, composed_text, golden_name
from tests.helpers import GOLDEN

facts = {}
for name in sys.argv[2:]:
    path = ROOT / name
    facts[name] = composed_text(path) == (GOLDEN / "composer" / golden_name(path)).read_text()  # compose's own stand-in
    facts[name + " dynamo"] = "torch._dynamo" in sys.modules
print(json.dumps(facts))
'''


def test_the_composer_writes_its_golden_candidates_under_the_stand_in():
    """compose() runs under the stand-in: a pointwise chain, a convolution and a GEMM traced without
    torch._dynamo, then a backward walk whose trace (make_fx) imports torch._inductor and so the real module."""
    from tests.experts.composer.test_golden import ROOT

    plain = ["examples/pointwise_chain/problem.py", "examples/conv_relu/problem.py",
             "benchmarks/suite/10_linear_gelu_scale.py"]
    facts = _run(COMPOSED, str(ROOT), *plain, "tests/fixtures/composer/backward_clamped_steps.py")
    assert all(facts[name] and not facts[name + " dynamo"] for name in plain), facts
    assert facts["tests/fixtures/composer/backward_clamped_steps.py"], facts
    assert facts["tests/fixtures/composer/backward_clamped_steps.py dynamo"], facts

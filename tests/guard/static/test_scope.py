"""The forward scope: the candidate's own modules are followed from forward into their methods."""

from kfoundry.guard import check_source
from tests.guard.static.helpers import assert_fires, render, src


def test_local_module_is_followed_not_flagged():
    source = src("""
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 2.0

            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return y


        class Leaky(nn.Module):
            def forward(self, x):
                return x * 0.5  # <-


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
                self.leaky = Leaky()

            def forward(self, x):
                return self.leaky(self.block(x))
    """)
    findings = check_source(source)
    assert not [f for f in findings if f.rule == "nn-compute-layer"], render(findings)
    assert_fires(source, "torch-compute")  # Leaky.forward is reached through self.leaky(...)

"""The rules on the forward scope: torch-compute, nn-compute-layer and stateful-forward fire on cheating
snippets at the marked line, and not on legitimate neighbours."""

import pytest

from tests.guard.static.helpers import assert_clean, assert_fires, model, src


# -- torch-compute --------------------------------------------------------------------------------

TORCH_COMPUTE_CHEATS = {
    "torch_function": model("return torch.matmul(x, x.t())  # <-"),
    "functional_alias": model("return F.gelu(x)  # <-"),
    "from_torch_nn_import_functional": src("""
        from torch.nn import functional as G


        class ModelNew(nn.Module):
            def forward(self, x):
                return G.softmax(x, dim=-1)  # <-
    """),
    "import_torch_as_T": src("""
        import torch as T


        class ModelNew(nn.Module):
            def forward(self, x):
                return T.relu(x)  # <-
    """),
    "from_torch_import_matmul": src("""
        from torch import matmul


        class ModelNew(nn.Module):
            def forward(self, x):
                return matmul(x, x)  # <-
    """),
    "module_level_alias": src("""
        mm = torch.mm


        class ModelNew(nn.Module):
            def forward(self, x):
                return mm(x, x)  # <-
    """),
    "linalg": model("return torch.linalg.norm(x, dim=-1)  # <-"),
    "special": model("return torch.special.erf(x)  # <-"),
    "fft": model("return torch.fft.fft(x)  # <-"),
    "tensor_sum": model("return x.sum(dim=-1)  # <-"),
    "tensor_exp_after_view": model("""
        y = x.contiguous().view(-1)
        return y.exp()  # <-
    """),
    "tensor_max": model("return x.max(dim=1)  # <-"),
    "tensor_clamp": model("return x.clamp(0.0, 1.0)  # <-"),
    "tensor_dunder_matmul": model("return x.__matmul__(x)  # <-"),
    "tensor_add_inplace": model("""
        y = torch.empty_like(x)
        y.add_(x)  # <-
        return y
    """),
    "matmul_operator_with_weight": model("""
        w = self.linear.weight
        return x @ w.t()  # <-
    """, init="self.linear = nn.Linear(4, 4)"),
    "operator_on_parameter": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y + self.bias  # <-
    """, init="self.bias = nn.Parameter(torch.zeros(4))"),
    "operator_on_buffer": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y * self.coef  # <-
    """, init='self.register_buffer("coef", torch.ones(4))'),
    "scale_by_python_number": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y * self.scale  # <-
    """),
    "augmented_assignment": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        y += x  # <-
        return y
    """),
    "unary_minus": model("return -x  # <-"),
    "builtin_abs_on_tensor": model("return abs(x)  # <-"),
    "boolean_mask": model("""
        keep = x > 0  # <-
        return keep
    """),
    "helper_function_reached_from_forward": src("""
        def _post(y):
            return y.mean(dim=-1)  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return _post(y)
    """),
    "helper_method_reached_from_forward": src("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.shift = 1.0

            def _finish(self, y):
                return y + self.shift  # <-

            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return self._finish(y)
    """),
    "transitively_reached": src("""
        def _inner(t):
            return torch.sigmoid(t)  # <-


        def _outer(t):
            return _inner(t)


        class ModelNew(nn.Module):
            def forward(self, x):
                return _outer(x)
    """),
    "static_method_on_helper_class": src("""
        class Ops:
            @staticmethod
            def finish(y):
                return torch.tanh(y)  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                return Ops.finish(x)
    """),
    "autograd_function_apply": src("""
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.relu()  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                return Fn.apply(x)
    """),
    "function_kept_on_self": model("return self.act(x)  # <-", init="self.act = F.gelu"),
    "extension_result": src("""
        from torch.utils.cpp_extension import load_inline

        _ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["f"])


        class ModelNew(nn.Module):
            def forward(self, x):
                y = _ext.f(x)
                return y * 2  # <-
    """),
}


@pytest.mark.parametrize("name", sorted(TORCH_COMPUTE_CHEATS))
def test_torch_compute_fires(name):
    assert_fires(TORCH_COMPUTE_CHEATS[name], "torch-compute")


def test_torch_compute_evidence_names_the_operator_and_method():
    finding = assert_fires(model("""
        w = self.linear.weight
        return x @ w  # <-
    """, init="self.linear = nn.Linear(4, 4)"), "torch-compute")
    assert finding.evidence == ["x @ w"]
    assert assert_fires(model("return x.sum()  # <-"), "torch-compute").evidence == ["x.sum()"]
    assert "F.gelu" in assert_fires(model("return F.gelu(x)  # <-"), "torch-compute").message


# -- nn-compute-layer -----------------------------------------------------------------------------

NN_CHEATS = {
    "submodule_call": model("return self.conv(x)  # <-", init="self.conv = nn.Conv2d(3, 8, 3)"),
    "activation_submodule": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return self.act(y)  # <-
    """, init="self.act = nn.GELU()"),
    "inline_layer": model("return nn.ReLU()(x)  # <-"),
    "inline_full_path_layer": model("return torch.nn.Softmax(dim=1)(x)  # <-"),
    "sequential": model("return self.body(x)  # <-", init="self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())"),
    "module_list_loop": model("""
        for layer in self.layers:
            x = layer(x)  # <-
        return x
    """, init="self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])"),
    "module_list_index": model("return self.layers[0](x)  # <-",
                               init="self.layers = nn.ModuleList([nn.Linear(4, 4)])"),
    "explicit_forward": model("return self.linear.forward(x)  # <-", init="self.linear = nn.Linear(4, 4)"),
    "local_subclass_without_forward": src("""
        class MyLinear(nn.Linear):
            pass


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = MyLinear(4, 4)

            def forward(self, x):
                return self.proj(x)  # <-
    """),
    "super_forward_of_a_layer": src("""
        class ModelNew(nn.Linear):
            def forward(self, x):
                return super().forward(x)  # <-
    """),
}


@pytest.mark.parametrize("name", sorted(NN_CHEATS))
def test_nn_compute_layer_fires(name):
    assert_fires(NN_CHEATS[name], "nn-compute-layer")


def test_nn_layer_read_only_for_weight_and_bias_is_fine():
    assert_clean(model("""
        w, b = self.linear.weight, self.linear.bias
        y = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype)
        _launch(w, b)
        eps = self.norm.eps
        return y
    """, init="self.linear = nn.Linear(4, 4)\nself.norm = nn.LayerNorm(4)\nself.ident = nn.Identity()"))
    assert_clean(model("return self.ident(x)", init="self.ident = nn.Identity()"))


# -- stateful-forward -----------------------------------------------------------------------------

STATEFUL_CHEATS = {
    "self_attribute": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.last = y  # <-
        return y
    """),
    "lazy_creation_is_still_state": model("""
        if self.buf is None:
            self.buf = torch.empty_like(x)  # <-
        _launch(x, self.buf)
        return self.buf
    """, init="self.buf = None"),
    "subscript_store_on_self": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.cache[x.data_ptr()] = y  # <-
        return y
    """, init="self.cache = {}"),
    "append_to_self_container": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.seen.append(y)  # <-
        return y
    """, init="self.seen = []"),
    "counter": model("""
        self.calls += 1  # <-
        return x
    """, init="self.calls = 0"),
    "setattr_self": model("""
        setattr(self, "out", x)  # <-
        return x
    """),
    "object_setattr_self": model("""
        object.__setattr__(self, "out", x)  # <-
        return x
    """),
    "register_buffer_in_forward": model("""
        self.register_buffer("out", x)  # <-
        return x
    """),
    "global_statement": src("""
        _last = None


        class ModelNew(nn.Module):
            def forward(self, x):
                global _last
                y = torch.empty_like(x)
                _launch(x, y)
                _last = y  # <-
                return y
    """),
    "in_a_helper_reached_from_forward": src("""
        class ModelNew(nn.Module):
            def _run(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                self.prev = y  # <-
                return y

            def forward(self, x):
                return self._run(x)
    """),
}


@pytest.mark.parametrize("name", sorted(STATEFUL_CHEATS))
def test_stateful_forward_fires(name):
    finding = assert_fires(STATEFUL_CHEATS[name], "stateful-forward")
    assert "state" in finding.message


def test_state_built_in_init_and_locals_in_forward_are_fine():
    assert_clean(model("""
        outs = []
        y = torch.empty_like(x)
        _launch(x, y)
        outs.append(y)
        shape = self.shape
        return outs[0]
    """, init="self.shape = (4, 4)\nself.buf = torch.empty(4)\nself.cache = {}"))

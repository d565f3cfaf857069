"""Handlers of torch.nn leaf modules (torch.fx keeps them as call_module nodes): their parameters are read
by attribute path, their configuration from the module object."""

from __future__ import annotations


import torch

from kfoundry.experts.composer.ir.builder import norm_dim
from kfoundry.experts.composer.read import decompose, norm
from kfoundry.experts.composer.read.fx_functions import HANDLERS as FUNCTION_HANDLERS
from kfoundry.experts.composer.read.fx_functions import adaptive_pool, conv, dropout_value, loss_by_class, pool
from kfoundry.experts.composer.read.handling import HandlerTable, Reader, Unsupported

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles


# -- modules --------------------------------------------------------------------------------------------
def _module_unary(name: str, **attrs_of):
    """A module computing one pointwise op; each attribute is a constant, or a function of the module's settings
    (`setting(name)`: the module's value, which the candidate checks when it runs)."""
    def handler(r: Reader, m, path, x, **kw):
        def setting(attr: str) -> float:
            return float(r.config(path, attr))
        attrs = {k: (f(setting) if callable(f) else f) for k, f in attrs_of.items()}
        return r.op(name, [r.tensor(x)], **attrs)
    return handler


for _cls, _name in {"ReLU": "relu", "ReLU6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh", "SiLU": "silu",
                    "Mish": "mish", "SELU": "selu", "Softsign": "softsign", "Hardswish": "hardswish",
                    "Hardsigmoid": "hardsigmoid", "LogSigmoid": "logsigmoid"}.items():
    HANDLERS[f"nn.{_cls}"] = _module_unary(_name)


@handles("nn.GELU")
def _m_gelu(r: Reader, m, path, x):
    return r.op("gelu", [r.tensor(x)], approximate=m.approximate)


HANDLERS["nn.LeakyReLU"] = _module_unary("leaky_relu", slope=lambda setting: setting("negative_slope"))
HANDLERS["nn.ELU"] = _module_unary("elu", alpha=lambda setting: setting("alpha"), scale=1.0, input_scale=1.0)
HANDLERS["nn.CELU"] = _module_unary("elu", alpha=lambda setting: setting("alpha"), scale=1.0,
                                    input_scale=lambda setting: 1.0 / setting("alpha"))
HANDLERS["nn.Softplus"] = _module_unary("softplus", beta=lambda setting: setting("beta"),
                                        threshold=lambda setting: setting("threshold"))
HANDLERS["nn.Hardtanh"] = _module_unary("clamp", min=lambda setting: setting("min_val"),
                                        max=lambda setting: setting("max_val"))
HANDLERS["nn.Threshold"] = _module_unary("threshold", threshold=lambda setting: setting("threshold"),
                                         value=lambda setting: setting("value"))


@handles("nn.Identity")
def _m_identity(r: Reader, m, path, x, *rest, **kw):
    return r.tensor(x)


@handles("nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d", "nn.AlphaDropout", "nn.FeatureAlphaDropout")
def _m_dropout(r: Reader, m, path, x):
    return dropout_value(r, x, float(m.p), m.training)


@handles("nn.Linear")
def _m_linear(r: Reader, m, path, x):
    return decompose.linear(r.b, r.tensor(x), r.state(path, "weight"), r.state(path, "bias"), r.origin)


@handles("nn.Conv1d", "nn.Conv2d", "nn.Conv3d")
def _m_conv(r: Reader, m, path, x):
    if m.padding_mode != "zeros":
        raise Unsupported(r.origin, f"padding_mode={m.padding_mode!r}")
    stride, padding, dilation = (r.config(path, name) for name in ("stride", "padding", "dilation"))
    return conv(r, r.tensor(x), r.state(path, "weight"), r.state(path, "bias"), stride, padding, dilation,
                r.attr(path, "groups"))


@handles("nn.ConvTranspose1d", "nn.ConvTranspose2d", "nn.ConvTranspose3d")
def _m_conv_t(r: Reader, m, path, x, output_size=None):
    if output_size is not None:
        raise Unsupported(r.origin, "output_size=")
    stride, padding, dilation, output_padding = (r.config(path, name) for name in
                                                 ("stride", "padding", "dilation", "output_padding"))
    return conv(r, r.tensor(x), r.state(path, "weight"), r.state(path, "bias"), stride, padding, dilation,
                r.attr(path, "groups"), True, output_padding)


def _pool_settings(r: Reader, path: str, names: tuple[str, ...]) -> list:
    """A pooling module's settings, which the pooling kernel unrolls (checked when the candidate runs)."""
    return [r.config(path, name) for name in names]


@handles("nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d")
def _m_max_pool(r: Reader, m, path, x):
    if m.return_indices:
        raise Unsupported(r.origin, "return_indices=True")
    nd = int(type(m).__name__[-2])
    settings = _pool_settings(r, path, ("kernel_size", "stride", "padding", "dilation", "ceil_mode"))
    return pool(r, "max_pool", r.tensor(x), nd, *settings)


@handles("nn.AvgPool1d", "nn.AvgPool2d", "nn.AvgPool3d")
def _m_avg_pool(r: Reader, m, path, x):
    nd = int(type(m).__name__[-2])
    kernel, stride, padding, ceil_mode, count_include_pad = _pool_settings(
        r, path, ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad"))
    divisor = r.config(path, "divisor_override") if hasattr(m, "divisor_override") else None
    return pool(r, "avg_pool", r.tensor(x), nd, kernel, stride, padding, 1, ceil_mode, count_include_pad, divisor)


@handles("nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d", "nn.AdaptiveMaxPool1d",
         "nn.AdaptiveMaxPool2d", "nn.AdaptiveMaxPool3d")
def _m_adaptive(r: Reader, m, path, x):
    if getattr(m, "return_indices", False):
        raise Unsupported(r.origin, "return_indices=True")
    name = type(m).__name__
    return adaptive_pool(r, "max" if "Max" in name else "avg", r.tensor(x), int(name[-2]),
                         r.config(path, "output_size"))


@handles("nn.Flatten")
def _m_flatten(r: Reader, m, path, x):
    x = r.tensor(x)
    return r.op("flatten", [x], start=norm_dim(m.start_dim, x.rank), end=norm_dim(m.end_dim, x.rank))


@handles("nn.Unflatten")
def _m_unflatten(r: Reader, m, path, x):
    x = r.tensor(x)
    dim = norm_dim(m.dim, x.rank)
    sizes = r.sizes_of(x)
    return r.op("reshape", [x], sizes=sizes[:dim] + tuple(r.config(path, "unflattened_size")) + sizes[dim + 1:])


@handles("nn.Softmax", "nn.LogSoftmax", "nn.Softmin")
def _m_softmax(r: Reader, m, path, x):
    x = r.tensor(x)
    dim = m.dim if m.dim is not None else (0 if x.rank in (0, 1, 3) else 1)
    if type(m).__name__ == "Softmin":
        x = r.op("neg", [x])
    return decompose.softmax(r.b, x, dim, r.origin, log=type(m).__name__ == "LogSoftmax")


@handles("nn.LayerNorm")
def _m_layer_norm(r: Reader, m, path, x):
    return norm.layer_norm(r.b, r.tensor(x), len(m.normalized_shape), r.state(path, "weight"),
                           r.state(path, "bias"), r.attr(path, "eps"), r.origin)


@handles("nn.RMSNorm")
def _m_rms_norm(r: Reader, m, path, x):
    x = r.tensor(x)
    eps = torch.finfo(x.dtype).eps if m.eps is None else r.attr(path, "eps")
    return norm.rms_norm(r.b, x, len(m.normalized_shape), r.state(path, "weight"), eps, r.origin)


@handles("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d")
def _m_batch_norm(r: Reader, m, path, x):
    use_batch = m.training or not m.track_running_stats or m.running_mean is None
    return norm.batch_norm(r.b, r.tensor(x), r.state(path, "running_mean"), r.state(path, "running_var"),
                           r.state(path, "weight"), r.state(path, "bias"), use_batch, r.attr(path, "eps"), r.origin)


@handles("nn.InstanceNorm1d", "nn.InstanceNorm2d", "nn.InstanceNorm3d")
def _m_instance_norm(r: Reader, m, path, x):
    x = r.tensor(x)
    if x.rank == int(type(m).__name__[-2]) + 1:
        raise Unsupported(r.origin, "an unbatched input")
    use_input = m.training or not m.track_running_stats
    return norm.instance_norm(r.b, x, r.state(path, "running_mean"), r.state(path, "running_var"),
                              r.state(path, "weight"), r.state(path, "bias"), use_input, r.attr(path, "eps"),
                              r.origin)


@handles("nn.GroupNorm")
def _m_group_norm(r: Reader, m, path, x):
    x = r.tensor(x)
    return norm.group_norm(r.b, x, r.attr(path, "num_groups"), r.state(path, "weight"), r.state(path, "bias"),
                           r.attr(path, "eps"), list(r.sizes_of(x)), r.origin)


@handles("nn.CrossEntropyLoss", "nn.NLLLoss")
def _m_cross_entropy(r: Reader, m, path, x, target):
    if getattr(m, "weight", None) is not None or getattr(m, "label_smoothing", 0.0):
        raise Unsupported(f"nn.{type(m).__name__}", "class weights or label smoothing")
    key = "cross_entropy" if type(m).__name__ == "CrossEntropyLoss" else "nll_loss"
    return loss_by_class(r, key, x, target, int(r.config(path, "ignore_index")), m.reduction)


@handles("nn.MSELoss", "nn.L1Loss", "nn.SmoothL1Loss", "nn.HuberLoss", "nn.KLDivLoss")
def _m_losses(r: Reader, m, path, x, target):
    name = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss",
            "KLDivLoss": "kl_div"}[type(m).__name__]
    kwargs = {"reduction": m.reduction}
    if name == "smooth_l1_loss":
        kwargs["beta"] = m.beta
    elif name == "huber_loss":
        kwargs["delta"] = m.delta
    elif name == "kl_div":
        kwargs["log_target"] = m.log_target
    r.key = name
    return FUNCTION_HANDLERS[name](r, x, target, **kwargs)

"""The ``linear`` op's reference and the ``Linear`` layer that routes ``nn.Linear`` through it."""

import pytest
import torch
import torch.nn.functional as F
from anna_core.kernels import KernelRegistry, bind_ops
from anna_core.kernels.ops import CORE_OPS
from anna_core.kernels.reference.linear import linear as ref_linear
from anna_core.layers.linear import Linear, linear_from, use_linear_op
from torch import nn


class CountingOps:
    """An op table stand-in whose ``linear`` records its calls and computes x @ w^T + b by hand."""

    def __init__(self):
        self.calls = 0

    @property
    def linear(self):
        def fn(x, weight, bias):
            self.calls += 1
            y = (x.unsqueeze(-2) * weight).sum(-1)
            return y if bias is None else y + bias

        return fn


def test_reference_linear_values_and_leading_dims():
    x = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    w = torch.tensor([[1.0, 0.0], [2.0, 1.0], [0.0, -1.0]])
    b = torch.tensor([0.5, 0.0, 1.0])
    torch.testing.assert_close(ref_linear(x, w, b), torch.tensor([[1.5, 4.0, -1.0], [1.0, 0.0, 2.0]]))
    x3 = torch.randn(2, 3, 2)
    assert ref_linear(x3, w, None).shape == (2, 3, 3)


@pytest.mark.parametrize("args, match", [
    ((torch.randn(2, 3), torch.randn(4, 5), None), "x must be"),
    ((torch.randn(2, 5), torch.randn(4, 5, 1), None), "weight must be"),
    ((torch.randn(2, 5), torch.randn(4, 5), torch.randn(3)), "bias must be"),
    ((torch.randn(2, 5), torch.randn(4, 5, dtype=torch.float64), None), "share one dtype"),
])
def test_reference_linear_bad_arguments(args, match):
    with pytest.raises(ValueError, match=f"^linear: .*{match}"):
        ref_linear(*args)


def test_linear_layer_through_the_registry_matches_nn_linear():
    registry = KernelRegistry(CORE_OPS)
    ops = bind_ops(registry, "cpu", torch.float32)
    torch.manual_seed(0)
    layer = Linear(6, 4, bias=True, ops=ops)
    x = torch.randn(3, 6)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))
    assert registry.chosen()["linear"] == "reference"


def test_linear_layer_keeps_nn_linear_state_dict_and_calls_the_op():
    ops = CountingOps()
    layer = Linear(5, 3, bias=False, ops=ops)
    plain = nn.Linear(5, 3, bias=False)
    assert set(layer.state_dict()) == set(plain.state_dict()) == {"weight"}
    assert [n for n, _ in layer.named_parameters()] == ["weight"] and not list(layer.children())
    layer.load_state_dict(plain.state_dict())
    x = torch.randn(2, 7, 5)
    y = layer(x)
    assert ops.calls == 1 and y.shape == (2, 7, 3)
    torch.testing.assert_close(y, plain(x))
    layer.ops = None  # no op table: plain F.linear
    torch.testing.assert_close(layer(x), plain(x))
    assert ops.calls == 1


def test_linear_from_shares_parameters_without_copying():
    src = nn.Linear(4, 6)
    new = linear_from(src, CountingOps())
    assert isinstance(new, Linear) and new.weight is src.weight and new.bias is src.bias
    assert new.weight.device.type == "cpu"
    x = torch.randn(3, 4)
    torch.testing.assert_close(new(x), src(x))
    with pytest.raises(TypeError, match="nn.Linear"):
        linear_from(nn.Conv1d(1, 1, 1), None)


def test_use_linear_op_swaps_every_linear_and_keeps_ties():
    emb = nn.Embedding(10, 4)
    model = nn.ModuleDict({"mlp": nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4, bias=False)),
                           "head": nn.Linear(4, 10, bias=False), "emb": emb})
    model["head"].weight = emb.weight  # tied LM head
    keys = set(model.state_dict())
    x = torch.randn(2, 4)
    want = model["head"](model["mlp"](x))
    ops = CountingOps()
    assert use_linear_op(model, ops) == 3
    assert isinstance(model["head"], Linear) and model["head"].weight is emb.weight
    assert set(model.state_dict()) == keys
    torch.testing.assert_close(model["head"](model["mlp"](x)), want)
    assert ops.calls == 3
    other = CountingOps()
    assert use_linear_op(model, other) == 3  # already converted: the op table is replaced
    model["head"](x)
    assert other.calls == 1 and ops.calls == 3

"""``load_gguf_derived``: parameters built from several GGUF tensors, with every problem named before
anything is read (tiny GGUFs written in-test)."""

import numpy as np
import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.weights.gguf_loader import GGUFDerived, load_gguf_derived
from anna_core.weights.gguf_reader import GGUFModelFile
from torch import nn

from tests.core._gguf_fakes import write_gguf

gguf = pytest.importorskip("gguf")

GATE = np.arange(2 * 3 * 32, dtype=np.float32).reshape(2, 3, 32)
UP = -GATE
GATE_ROW = np.linspace(-1, 1, 32, dtype=np.float32)


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.device("meta"):
            self.gate_up = nn.Parameter(torch.empty(2, 6, 32))
            self.row = nn.Parameter(torch.empty(1, 32, dtype=torch.float16))


def recipes(row_shape=(1, 32)) -> list[GGUFDerived]:
    return [GGUFDerived("gate_up", ("gate", "up"), ((2, 3, 32), (2, 3, 32)), lambda g, u: torch.cat([g, u], 1)),
            GGUFDerived("row", ("row",), (row_shape,), lambda t: t.reshape(1, 32))]


def _file(tmp_path, **tensors):
    return GGUFModelFile([write_gguf(tmp_path / "m.gguf", tensors=tensors)])


def test_builds_each_parameter_from_its_sources_in_its_dtype(tmp_path):
    model = Experts()
    # "row" stored as [32]: ggml pads shapes with ones, so it matches the [1, 32] the recipe names
    load_gguf_derived(model, _file(tmp_path, gate=GATE, up=UP, row=GATE_ROW, mtp=GATE_ROW), recipes(),
                      device=torch.device("cpu"), ignore=lambda n: n == "mtp")
    assert torch.equal(model.gate_up, torch.from_numpy(np.concatenate([GATE, UP], axis=1)))
    assert model.row.dtype == torch.float16 and not model.row.requires_grad
    assert torch.equal(model.row, torch.from_numpy(GATE_ROW).half().reshape(1, 32))


def test_every_problem_is_named_before_reading(tmp_path):
    g = _file(tmp_path, gate=GATE[:1], row=GATE_ROW, extra=GATE_ROW)
    with pytest.raises(ModelLoadError) as err:
        load_gguf_derived(Experts(), g, recipes(), device=torch.device("cpu"))
    msg = str(err.value)
    assert "missing tensors (model parameters not in the file): ['up (for gate_up)']" in msg
    assert "unexpected tensors (no matching model parameter): ['extra']" in msg
    assert "shape mismatches: gate: file [1, 3, 32] vs model [2, 3, 32] (gate_up)" in msg


def test_parameters_without_a_recipe_and_bad_builds(tmp_path):
    g = _file(tmp_path, gate=GATE, up=UP, row=GATE_ROW)
    with pytest.raises(ModelLoadError, match=r"model parameters no GGUF tensor is mapped to: \['row'\]"):
        load_gguf_derived(Experts(), g, recipes()[:1], device=torch.device("cpu"))
    wrong = [recipes()[0], GGUFDerived("row", ("row",), ((32,),))]  # forgets the reshape
    with pytest.raises(ModelLoadError, match=r"row built from \['row'\] has shape \[32\], the model needs \[1, 32\]"):
        load_gguf_derived(Experts(), g, wrong, device=torch.device("cpu"))

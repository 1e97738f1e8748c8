"""What the weight loaders share: matching file tensors to parameters, the mismatch error, assignment.

Both :func:`~anna_core.weights.safetensors_loader.load_safetensors` and
:func:`~anna_core.weights.gguf_loader.load_gguf` map file tensor names to parameter names with a
family's name map, verify the result with :func:`check_plan` (one error naming every problem), then
replace each parameter with :func:`set_param`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

import attrs
import torch
from torch import nn

from anna_core.errors import ModelLoadError

NameMap = Callable[[str], "str | None"]
"""File tensor name -> parameter name, or ``None`` to ignore the tensor."""


@attrs.frozen
class LoadPlan:
    """File tensors matched to the parameters of a model.

    Attributes:
        targets: file tensor name -> parameter name, for every tensor to load.
        missing: parameters no file tensor maps to (sorted).
        unexpected: file tensors mapping to a name that is not a parameter.
        twice: file tensors mapping to a parameter an earlier tensor already maps to.
    """

    targets: dict[str, str]
    missing: list[str]
    unexpected: list[str]
    twice: list[str]


def plan_load(names: Iterable[str], name_map: NameMap, params: dict[str, nn.Parameter]) -> LoadPlan:
    """Match the file tensor ``names`` (in file order) to ``params`` through ``name_map``."""
    targets: dict[str, str] = {}
    unexpected, twice = [], []
    for name in names:
        target = name_map(name)
        if target is None:
            continue
        if target not in params:
            unexpected.append(name)
        elif target in targets.values():
            twice.append(name)
        else:
            targets[name] = target
    missing = sorted(set(params) - set(targets.values()))
    return LoadPlan(targets=targets, missing=missing, unexpected=unexpected, twice=twice)


def check_plan(plan: LoadPlan, *, source: str, where: str, mismatched: list[str], more: Iterable[str] = ()) -> None:
    """Raise one error listing every problem of ``plan``, if any.

    Args:
        plan: the matching to verify.
        source: what was read, for the message (e.g. ``"checkpoint '/models/x'"``).
        where: the file kind in "model parameters not in <where>" (e.g. ``"the checkpoint"``).
        mismatched: shape mismatch descriptions, one per tensor.
        more: further problem descriptions, appended as they are.

    Raises:
        ModelLoadError: missing, unexpected or doubly mapped tensors, shape mismatches or ``more``;
            the message names every offending tensor.
    """
    problems = []
    if plan.missing:
        problems.append(f"missing tensors (model parameters not in {where}): {plan.missing}")
    if plan.unexpected:
        problems.append(f"unexpected tensors (no matching model parameter): {sorted(plan.unexpected)}")
    if plan.twice:
        problems.append(f"tensors mapping to an already-loaded parameter: {sorted(plan.twice)}")
    if mismatched:
        problems.append("shape mismatches: " + "; ".join(mismatched))
    problems += list(more)
    if problems:
        raise ModelLoadError(f"{source} does not match the model: " + " | ".join(problems))


def set_param(model: nn.Module, name: str, value: torch.Tensor) -> None:
    """Replace parameter ``name`` of ``model`` by ``value`` (no copy, ``requires_grad=False``)."""
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    module._parameters[attr] = nn.Parameter(value, requires_grad=False)


def progress(total: int, desc: str):
    """A tqdm bar over ``total`` tensors, shown only when stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="tensor", disable=not sys.stderr.isatty(), leave=False)

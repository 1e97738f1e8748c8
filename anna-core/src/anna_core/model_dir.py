"""Model directory inspection: what a ``--model-dir`` holds and which family serves it.

The family is chosen from ``config.json`` (``model_type``, then ``architectures``) or, for GGUF,
from the file's ``general.architecture`` -- never from file or folder names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs

from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.registry import KNOWN_FAMILY_DISTRIBUTIONS, ModelFamilySpec

_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<idx>\d{5})-of-(?P<total>\d{5})\.gguf$")


@attrs.frozen
class ModelSource:
    """Where a model's files are.

    Attributes:
        format: ``"safetensors"`` (a folder with ``config.json``, possibly only that, for
            ``--load-format dummy``) or ``"gguf"``.
        root: the model folder (for GGUF, the folder holding the file).
        config: parsed ``config.json`` (``{}`` for GGUF).
        gguf_files: the GGUF file(s), in split order (empty for safetensors).
        gguf_architecture: GGUF ``general.architecture`` (None for safetensors).
    """

    format: str
    root: Path
    config: dict[str, Any] = attrs.field(factory=dict)
    gguf_files: tuple[Path, ...] = ()
    gguf_architecture: str | None = None


def _gguf_architecture(path: Path) -> str:
    from anna_core.weights.gguf_reader import read_gguf_architecture

    return read_gguf_architecture(path)


def _group_gguf(files: list[Path]) -> list[tuple[Path, ...]]:
    """Group GGUF files into models: split files ``X-0000i-of-0000N.gguf`` form one model."""
    groups: dict[str, list[tuple[int, int, Path]]] = {}
    singles: list[tuple[Path, ...]] = []
    for f in sorted(files):
        m = _SPLIT_GGUF.match(f.name)
        if m:
            groups.setdefault(m["stem"], []).append((int(m["idx"]), int(m["total"]), f))
        else:
            singles.append((f,))
    for stem, parts in groups.items():
        parts.sort()
        total = parts[0][1]
        if [p[0] for p in parts] != list(range(1, total + 1)):
            raise ModelLoadError(
                f"split GGUF {stem!r} is incomplete: found parts {[p[0] for p in parts]} of {total}"
            )
        singles.append(tuple(p[2] for p in parts))
    return singles


def inspect_model_dir(path: str | Path, gguf_file: str | None = None) -> ModelSource:
    """Describe the model at ``path`` (a folder, or a ``.gguf`` file).

    Raises:
        ModelLoadError: the path does not exist, holds no model, or is ambiguous (both GGUF and
            safetensors, or several GGUF models) without ``gguf_file`` to pick one.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelLoadError(f"model path {str(p)!r} does not exist")
    if p.is_file():
        if p.suffix != ".gguf":
            raise ModelLoadError(f"{str(p)!r} is a file but not a .gguf file; pass a model folder")
        siblings = [f for f in p.parent.glob("*.gguf")]
        group = next((g for g in _group_gguf(siblings) if p in g), (p,))
        return ModelSource("gguf", p.parent, gguf_files=group, gguf_architecture=_gguf_architecture(group[0]))
    ggufs = _group_gguf(list(p.glob("*.gguf")))
    has_config = (p / "config.json").is_file()
    has_safetensors = any(p.glob("*.safetensors"))
    if gguf_file is not None:
        chosen = [g for g in ggufs if g[0].name == gguf_file or any(f.name == gguf_file for f in g)]
        if not chosen:
            raise ModelLoadError(f"--gguf-file {gguf_file!r} not found in {str(p)!r}; GGUF files there: "
                                 f"{[g[0].name for g in ggufs]}")
        return ModelSource("gguf", p, gguf_files=chosen[0], gguf_architecture=_gguf_architecture(chosen[0][0]))
    if ggufs and (has_safetensors or len(ggufs) > 1):
        names = [g[0].name for g in ggufs]
        extra = " and safetensors weights" if has_safetensors else ""
        raise ModelLoadError(
            f"{str(p)!r} holds several models (GGUF files {names}{extra}); pick one with --gguf-file NAME"
            + (" (or move the GGUF out to serve the safetensors)" if has_safetensors else "")
        )
    if ggufs:
        return ModelSource("gguf", p, gguf_files=ggufs[0], gguf_architecture=_gguf_architecture(ggufs[0][0]))
    if not has_config:
        raise ModelLoadError(f"{str(p)!r} has no config.json and no .gguf file")
    try:
        config = json.loads((p / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{str(p / 'config.json')!r} is not valid JSON: {exc}") from exc
    return ModelSource("safetensors", p, config=config)


def select_family(source: ModelSource, families: list[ModelFamilySpec]) -> ModelFamilySpec:
    """The family serving ``source``.

    Raises:
        UnsupportedModelError: no installed family serves it; the message lists the supported
            types and names the distribution that would add this one.
    """
    if source.format == "gguf":
        arch = source.gguf_architecture or ""
        for fam in families:
            if arch in fam.gguf_architectures:
                return fam
        supported = sorted({a for f in families for a in f.gguf_architectures})
        hint = KNOWN_FAMILY_DISTRIBUTIONS.get(arch)
        raise UnsupportedModelError(
            f"GGUF architecture {arch!r} is not supported by the installed plugins; supported GGUF "
            f"architectures: {supported or 'none'}"
            + (f". Install {hint} to add it." if hint else ".")
        )
    model_type = source.config.get("model_type")
    archs = source.config.get("architectures") or []
    for fam in families:
        if model_type in fam.model_types:
            return fam
    for fam in families:
        if any(a in fam.architectures for a in archs):
            return fam
    supported = sorted({t for f in families for t in f.model_types})
    hint = KNOWN_FAMILY_DISTRIBUTIONS.get(model_type or "")
    raise UnsupportedModelError(
        f"model_type {model_type!r} (architectures {archs}) is not supported by the installed "
        f"plugins; supported model types: {supported or 'none'}"
        + (f". Install {hint} to add it." if hint else ".")
    )

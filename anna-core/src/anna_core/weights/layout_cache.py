"""The layout cache: a pre-quantized checkpoint's weights repacked into the ``wq_linear`` layouts
(:mod:`anna_core.weights.prequant`), saved once under ``$ANNA_CACHE_DIR/quant-layouts/<key>/`` (never inside
the model folder, which may be read-only) so later loads read them instead of repacking.

``<key>`` hashes everything the repacked tensors depend on (:func:`cache_key`): each source safetensors file's
resolved path, size, modification time and a hash of its header (the tensor names, dtypes, shapes and
offsets), the device kind (``cuda`` / ``xpu`` / ``cpu``), the serving dtype, the quantization method
(:meth:`~anna_core.weights.prequant.PrequantConfig.to_json`), the cache format and the torch, safetensors and
anna-core versions. A changed checkpoint thus misses and is rebuilt; an entry that cannot be read (a truncated
or corrupt file, a missing tensor, a tensor whose shape or dtype is not what repacking the checkpoint makes) is
removed and rebuilt; a cache that cannot be written logs a warning and the load goes on with the weights repacked
in memory. Writing an entry removes the older entries of the same files, device kind and dtype (:func:`slot`):
a re-downloaded checkpoint or a library upgrade replaces its entry rather than adding a copy.

An entry is a folder holding ``weights.safetensors`` (per linear ``<prefix>.qweight``, ``<prefix>.scale``,
``<prefix>.zero`` for int4, ``<prefix>.perm`` for an act-order GPTQ linear) and ``entry.json`` (``{"format",
"scheme", "kind", "prefixes", "permuted", "key_material"}``; ``permuted``: the prefixes with a ``perm``), written
last: an entry without it is incomplete and never read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from anna_core.cache_dir import cache_dir
from anna_core.weights.gpu_quant import QuantizedWeight
from anna_core.weights.prequant import PrequantConfig

log = logging.getLogger("anna.weights")

CACHE_SUBDIR = "quant-layouts"
CACHE_FORMAT = "2"  # 2: act-order GPTQ weights keep their column order (perm)
ENTRY_FILE = "entry.json"
WEIGHTS_FILE = "weights.safetensors"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def header_hash(path: Path) -> str:
    """SHA-256 of a safetensors file's header (its 8-byte length and JSON).

    Raises:
        OSError: the file cannot be read.
        ValueError: the file is too short for its header.
    """
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        header = f.read(length)
        if len(header) != length:
            raise ValueError(f"{path}: truncated safetensors header")
    return hashlib.sha256(raw + header).hexdigest()


def key_material(files: Iterable[Path], cfg: PrequantConfig, device_kind: str, dtype: torch.dtype) -> dict[str, Any]:
    """What the cache key hashes (JSON-ready; shown by ``anna quant-cache inspect``).

    Raises:
        OSError, ValueError: a source file cannot be read (see :func:`header_hash`).
    """
    sources = []
    for path in sorted({Path(p).resolve() for p in files}):
        st = path.stat()
        sources.append({"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                        "header_sha256": header_hash(path)})
    return {"format": CACHE_FORMAT, "sources": sources, "device": device_kind, "dtype": str(dtype).replace("torch.", ""),
            "method": cfg.to_json(), "versions": {d: _version(d) for d in ("torch", "safetensors", "anna-core")}}


def cache_key(material: Mapping[str, Any]) -> str:
    """The entry folder name of ``material`` (:func:`key_material`)."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def slot(material: Mapping[str, Any]) -> tuple[Any, ...]:
    """What one entry at a time is kept for: the source files' paths, the device kind and the serving dtype of
    ``material`` (:func:`key_material`). A new entry replaces the older ones of its slot (another size, mtime,
    header, method or library version of the same files).

    Raises:
        KeyError, TypeError: ``material`` is not shaped as :func:`key_material` makes it.
    """
    return (tuple(sorted(src["path"] for src in material["sources"])), material["device"], material["dtype"])


def _checked_perm(prefix: str, tensors: Mapping[str, torch.Tensor], k: int) -> torch.Tensor:
    """``<prefix>.perm`` of an entry's tensors, checked to be an int64 permutation of ``range(k)``.

    Raises:
        KeyError: no such tensor.
        ValueError: another dtype or shape, or not a permutation.
    """
    perm = tensors[f"{prefix}.perm"]
    if perm.dtype != torch.int64 or tuple(perm.shape) != (k,) or not torch.equal(perm.sort().values, torch.arange(k)):
        raise ValueError(f"{prefix}.perm is not a permutation of the weight's {k} input columns")
    return perm


class LayoutCache:
    """The layout cache under ``root`` (default ``$ANNA_CACHE_DIR/quant-layouts``).

    Args:
        root: the cache folder (created on the first store).
    """

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir() / CACHE_SUBDIR

    def entry_dir(self, material: Mapping[str, Any]) -> Path:
        """The folder of the entry for ``material``."""
        return self.root / cache_key(material)

    def load(self, material: Mapping[str, Any],
             expected: Mapping[str, Mapping[str, tuple[tuple[int, ...], torch.dtype]]]) -> dict[str, QuantizedWeight] | None:
        """The cached weights (on the CPU) of the linears ``expected`` names, or None on a miss.

        Args:
            material: the entry's key material (:func:`key_material`).
            expected: ``{prefix: {"qweight" | "scale" | "zero": (shape, dtype)}}``, what repacking the checkpoint
                makes (:func:`~anna_core.weights.prequant.repacked_layout`), in the order the entry lists them.

        A corrupt entry (unreadable, another key's, a missing tensor, a tensor whose shape or dtype differs from
        ``expected``, a ``perm`` that is not a permutation of the weight's ``K`` columns) is removed, with a
        warning, and counts as a miss.
        """
        entry = self.entry_dir(material)
        meta_path = entry / ENTRY_FILE
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("key_material") != json.loads(json.dumps(material)) or meta.get("prefixes") != list(expected):
                raise ValueError("the entry was written for another checkpoint")
            from safetensors.torch import load_file

            tensors = load_file(str(entry / WEIGHTS_FILE), device="cpu")
            permuted = set(meta.get("permuted", []))
            out = {}
            for prefix, layout in expected.items():
                for suffix, (shape, dtype) in layout.items():
                    t = tensors[f"{prefix}.{suffix}"]
                    if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                        raise ValueError(f"{prefix}.{suffix} is {t.dtype} {list(t.shape)}, the checkpoint makes "
                                         f"{dtype} {list(shape)}")
                zero = tensors[f"{prefix}.zero"] if "zero" in layout else None
                weight = QuantizedWeight(tensors[f"{prefix}.qweight"], tensors[f"{prefix}.scale"], zero,
                                         meta["scheme"])
                if prefix in permuted:
                    weight = attrs.evolve(weight, perm=_checked_perm(prefix, tensors, weight.shape[1]))
                elif f"{prefix}.perm" in tensors:
                    raise ValueError(f"{prefix}.perm is stored but the entry does not list it")
                out[prefix] = weight
            return out
        except Exception as exc:  # any unreadable entry is rebuilt
            log.warning("layout cache entry %s is unreadable (%s): removing it and repacking", entry, exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def store(self, material: Mapping[str, Any], weights: Mapping[str, QuantizedWeight], kind: str) -> Path | None:
        """Save ``weights`` (``{prefix: weight}``) as the entry of ``material``; returns its folder, or None when
        the cache cannot be written (logged as a warning; the caller keeps its in-memory weights)."""
        from safetensors.torch import save_file

        entry = self.entry_dir(material)
        tmp: str | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=".tmp-", dir=self.root)
            tensors: dict[str, torch.Tensor] = {}
            schemes = set()
            for prefix, w in weights.items():
                schemes.add(w.scheme)
                tensors[f"{prefix}.qweight"] = w.qweight.detach().cpu().contiguous()
                tensors[f"{prefix}.scale"] = w.scale.detach().cpu().contiguous()
                if w.zero is not None:
                    tensors[f"{prefix}.zero"] = w.zero.detach().cpu().contiguous()
                if w.perm is not None:
                    tensors[f"{prefix}.perm"] = w.perm.detach().cpu().contiguous()
            if len(schemes) > 1:
                raise ValueError(f"one scheme per entry, got {sorted(schemes)}")
            save_file(tensors, os.path.join(tmp, WEIGHTS_FILE))
            meta = {"format": CACHE_FORMAT, "scheme": schemes.pop() if schemes else None, "kind": kind,
                    "prefixes": list(weights), "permuted": [p for p, w in weights.items() if w.perm is not None],
                    "key_material": material}
            Path(tmp, ENTRY_FILE).write_text(json.dumps(meta, indent=1))
            shutil.rmtree(entry, ignore_errors=True)
            os.replace(tmp, entry)
            tmp = None
            self._evict_superseded(material, entry)
            return entry
        except Exception as exc:
            log.warning("cannot write the layout cache entry %s (%s): the repacked weights stay in memory only",
                        entry, exc)
            return None
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _evict_superseded(self, material: Mapping[str, Any], kept: Path) -> None:
        """Remove the entries other than ``kept`` for the same :func:`slot` as ``material``: built from an older
        state of the same files (re-downloaded, edited) or by other library versions, they would never be read
        again."""
        wanted = slot(material)
        for entry in [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".") and p != kept]:
            try:
                meta = json.loads((entry / ENTRY_FILE).read_text())
                if slot(meta["key_material"]) != wanted:
                    continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
            log.info("layout cache: removing %s, superseded by %s", entry, kept)
            shutil.rmtree(entry, ignore_errors=True)

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry: ``{"path", "bytes", "kind", "scheme", "layers", "sources", "device", "dtype"}``."""
        out = []
        if not self.root.is_dir():
            return out
        for entry in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                meta = json.loads((entry / ENTRY_FILE).read_text())
            except (OSError, ValueError):
                continue
            km = meta.get("key_material", {})
            out.append({"path": str(entry), "bytes": sum(f.stat().st_size for f in entry.iterdir() if f.is_file()),
                        "kind": meta.get("kind"), "scheme": meta.get("scheme"), "layers": len(meta.get("prefixes", [])),
                        "sources": [s.get("path") for s in km.get("sources", [])], "device": km.get("device"),
                        "dtype": km.get("dtype")})
        return out

    def clear(self, sources: Iterable[Path] | None = None) -> int:
        """Remove the entries built from any of ``sources`` (every entry when None, temporary folders too);
        returns how many entries were removed."""
        if not self.root.is_dir():
            return 0
        wanted = None if sources is None else {str(Path(p).resolve()) for p in sources}
        removed = 0
        for entry in [p for p in self.root.iterdir() if p.is_dir()]:
            if entry.name.startswith("."):
                if wanted is None:
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            if wanted is not None:
                try:
                    meta = json.loads((entry / ENTRY_FILE).read_text())
                    paths = {s.get("path") for s in meta["key_material"]["sources"]}
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if not paths & wanted:
                    continue
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
        return removed

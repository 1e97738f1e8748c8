"""Reading GGUF files (llama.cpp's single-file checkpoint format) through the ``gguf`` library.

A GGUF file holds a header, key/value metadata (``general.architecture``, hyper-parameters under
``<arch>.*``, the tokenizer under ``tokenizer.*``) and tensors, each stored as raw bytes of a GGML
type (``F32``, ``F16``, ``Q4_1``, ...). A model may be split over files named
``X-00001-of-0000N.gguf``; :class:`GGUFModelFile` opens the parts as one model. Tensors are
memory-mapped and only dequantized (by :mod:`anna_core.weights.dequant`) when asked for.

Tensor shapes here are in torch order: GGUF lists dimensions fastest-varying first, so a matrix
stored as ``[ne0=in, ne1=out]`` is ``(out, in)`` here, like a ``nn.Linear`` weight.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from anna_core.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
_MISSING = object()

# GGUF scalar value types (gguf.GGUFValueType) -> struct format; 8 = string, 9 = array.
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _HeaderCursor:
    """Sequential reads from an open GGUF file; running out of bytes means the file is truncated."""

    def __init__(self, fh, path: Path, order: str = "<"):
        self.fh, self.path, self.order = fh, path, order

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise ModelLoadError(f"GGUF file {str(self.path)!r} is truncated: its header ends early "
                                 "(re-download or re-convert the file)")
        return data

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(self.order + fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.read(self.scalar("Q"))
        return raw.decode("utf-8", errors="replace")

    def skip_value(self, vtype: int) -> None:
        if vtype == _STRING:
            self.fh.seek(self.scalar("Q"), 1)
        elif vtype == _ARRAY:
            etype, count = self.scalar("I"), self.scalar("Q")
            if etype in _SCALAR_FORMATS:
                self.fh.seek(count * struct.calcsize(_SCALAR_FORMATS[etype]), 1)
            else:
                for _ in range(count):
                    self.skip_value(etype)
        elif vtype in _SCALAR_FORMATS:
            self.fh.seek(struct.calcsize(_SCALAR_FORMATS[vtype]), 1)
        else:
            raise ModelLoadError(f"GGUF file {str(self.path)!r} is corrupt: unknown metadata value type {vtype}")


def read_gguf_architecture(path: str | Path) -> str:
    """``general.architecture`` of a GGUF file, reading only its header (fast on any size).

    Raises:
        ModelLoadError: the file does not start with the GGUF magic, its header is truncated or
            corrupt, or it has no ``general.architecture``.
    """
    arch = _scan_header(Path(path))
    if arch is None:
        raise ModelLoadError(f"GGUF file {str(path)!r} has no general.architecture metadata")
    return arch


def _scan_header(path: Path) -> str | None:
    """Check the magic and walk the metadata; ``general.architecture`` if present (split parts
    after the first have none)."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise ModelLoadError(f"cannot open GGUF file {str(path)!r}: {exc}") from exc
    with fh:
        cur = _HeaderCursor(fh, path)
        magic = fh.read(4)
        if magic != GGUF_MAGIC:
            raise ModelLoadError(f"{str(path)!r} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
        version = cur.scalar("I")
        if version & 0xFFFF == 0:  # written with the other byte order
            cur.order = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version < 2:
            raise ModelLoadError(f"GGUF file {str(path)!r} has version {version}; versions 2 and 3 are supported")
        cur.scalar("Q")  # tensor count
        kv_count = cur.scalar("Q")
        for _ in range(kv_count):
            key = cur.string()
            vtype = cur.scalar("I")
            if key == "general.architecture" and vtype == _STRING:
                return cur.string()
            cur.skip_value(vtype)
    return None


@attrs.frozen
class GGUFTensor:
    """One stored tensor.

    Attributes:
        name: llama.cpp tensor name (``blk.0.attn_q.weight``).
        ggml_type: the GGML type (a ``gguf.GGMLQuantizationType``).
        shape: logical shape in torch order (``(out, in)`` for matrices).
        raw: the memory-mapped stored data (bytes for quantized types), read-only.
    """

    name: str
    ggml_type: Any
    shape: tuple[int, ...]
    raw: np.ndarray

    @property
    def type_name(self) -> str:
        return getattr(self.ggml_type, "name", str(self.ggml_type))


def _open_reader(path: Path):
    import gguf

    _scan_header(path)  # clear errors for a bad magic or a truncated header
    try:
        return gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # the gguf reader raises ValueError / IndexError / KeyError here
        size = path.stat().st_size if path.exists() else 0
        raise ModelLoadError(
            f"GGUF file {str(path)!r} ({size} bytes) is truncated or corrupt: {exc} "
            "(its tensor data may extend past the end of the file; re-download it)"
        ) from exc


class GGUFModelFile:
    """A GGUF model: one file or the parts of a split file, opened as one.

    Args:
        paths: the file(s), in split order (``-00001-of-0000N`` first).

    Attributes:
        paths: the files.
        metadata: every key/value of the first file (split parts add keys the first lacks),
            decoded to Python values (strings, numbers, lists).
        tensors: ``{name: GGUFTensor}`` over all parts.

    Raises:
        ModelLoadError: a file is missing, not GGUF, truncated or corrupt; a tensor name appears in
            two parts; or the split metadata disagrees with the parts given.
    """

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = tuple(Path(p) for p in paths)
        if not self.paths:
            raise ModelLoadError("no GGUF file given")
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, GGUFTensor] = {}
        for path in self.paths:
            reader = _open_reader(path)
            for key, field in reader.fields.items():
                if key.startswith("GGUF.") or key in self.metadata:
                    continue
                self.metadata[key] = field.contents()
            for t in reader.tensors:
                if t.name in self.tensors:
                    raise ModelLoadError(f"tensor {t.name!r} appears in two parts of {str(self.paths[0])!r}")
                shape = tuple(int(d) for d in reversed(t.shape.tolist()))
                self.tensors[t.name] = GGUFTensor(t.name, t.tensor_type, shape, t.data)
        count = self.metadata.get("split.count")
        if count is not None and int(count) != len(self.paths):
            raise ModelLoadError(f"GGUF {str(self.paths[0])!r} says it is split into {count} files, "
                                 f"but {len(self.paths)} were given")
        total = self.metadata.get("split.tensors.count")
        if total is not None and int(total) != len(self.tensors):
            raise ModelLoadError(f"GGUF {str(self.paths[0])!r} should hold {total} tensors over its parts, "
                                 f"found {len(self.tensors)}")

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``"llama"``)."""
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """A metadata value.

        Raises:
            ModelLoadError: ``key`` is absent and no default was given.
        """
        if key in self.metadata:
            return self.metadata[key]
        if default is _MISSING:
            raise ModelLoadError(f"GGUF file {str(self.paths[0])!r} lacks the metadata key {key!r}")
        return default

    def arch_get(self, suffix: str, default: Any = _MISSING) -> Any:
        """``get(f"{architecture}.{suffix}")``, e.g. ``arch_get("block_count")``."""
        return self.get(f"{self.architecture}.{suffix}", default)

    def vocabulary_shape(self) -> tuple[int, bool]:
        """``(vocab_size, tied)`` of a text model in llama.cpp's layout: the rows of ``token_embd.weight``, and
        whether the file has no separate ``output.weight`` (the LM head is the embedding).

        Raises:
            ModelLoadError: the file has no ``token_embd.weight``.
        """
        embed = self.tensors.get("token_embd.weight")
        if embed is None:
            raise ModelLoadError(f"the GGUF {str(self.paths[0])!r} has no token_embd.weight")
        return embed.shape[0], "output.weight" not in self.tensors

    def tensor(self, name: str, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> torch.Tensor:
        """Tensor ``name`` dequantized to ``dtype`` on ``device``, in torch-order shape.

        Raises:
            ModelLoadError: no such tensor, or its GGML type is not supported.
        """
        from anna_core.weights.dequant import dequantize

        info = self.tensors.get(name)
        if info is None:
            raise ModelLoadError(f"GGUF file {str(self.paths[0])!r} has no tensor {name!r}")
        return dequantize(info.raw, info.ggml_type, info.shape, dtype=dtype, device=device)

"""Compare two Qwen3-TTS golden fixture folders (``golden/`` of ``make_qwen3_tts_fixtures.py``'s output).

    python tools/tts_fixtures/compare_fixtures.py tests/audio/fixtures/qwen3_tts /tmp/qwen3_tts_fixtures

Prints, per golden file, whether every integer tensor (codec tokens) is equal and the largest absolute
difference of every float tensor; exits 1 when a tensor is missing on one side, a shape differs or integer
tensors differ.
"""

from __future__ import annotations

import sys
from pathlib import Path


def compare(left: Path, right: Path) -> int:
    from safetensors.torch import load_file

    bad = 0
    for path in sorted((left / "golden").glob("*.safetensors")):
        other = right / "golden" / path.name
        if not other.exists():
            print(f"{path.name}: missing in {right}")
            bad += 1
            continue
        a, b = load_file(str(path)), load_file(str(other))
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                print(f"{path.name} {name}: only in {'left' if name in a else 'right'}")
                bad += 1
            elif a[name].shape != b[name].shape:
                print(f"{path.name} {name}: shape {tuple(a[name].shape)} vs {tuple(b[name].shape)}")
                bad += 1
            elif a[name].is_floating_point():
                diff = (a[name].double() - b[name].double()).abs().max().item() if a[name].numel() else 0.0
                print(f"{path.name} {name}: max |diff| {diff:.3g}")
            elif not bool((a[name] == b[name]).all()):
                print(f"{path.name} {name}: integers differ")
                bad += 1
    print("equal codes and shapes" if not bad else f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(compare(Path(sys.argv[1]), Path(sys.argv[2])))

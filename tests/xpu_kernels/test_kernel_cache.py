"""The kernel cache folder (anna_xpu_kernels.kernel_cache): keyed per machine, under Anna's cache root,
corrupt entries removed before Triton may trust them."""

import json
import os

from anna_xpu_kernels import kernel_cache

H200 = {"device": "NVIDIA H200", "capability": "sm90", "driver": "13000", "runtime": "cuda13.0"}


def _entry(root, name, files):
    d = root / name
    d.mkdir(parents=True)
    for fname, data in files.items():
        (d / fname).write_bytes(data)
    return d


def test_sweep_removes_corrupt_entries_and_keeps_sound_ones(tmp_path):
    good = _entry(tmp_path, "aa", {"k.json": json.dumps({"name": "k"}).encode(), "k.cubin": b"\x7fELF....",
                                   "k.autotune.json": b'{"configs_timings": []}'})
    bad_json = _entry(tmp_path, "bb", {"k.json": b'{"name": ', "k.cubin": b"\x7fELF...."})
    empty = _entry(tmp_path, "cc", {"k.json": b"{}", "k.cubin": b""})
    not_elf = _entry(tmp_path, "dd", {"k.json": b"{}", "k.cubin": b"garbage"})
    assert kernel_cache.sweep(tmp_path) == 3
    assert good.exists() and not bad_json.exists() and not empty.exists() and not not_elf.exists()
    assert kernel_cache.sweep(tmp_path) == 0  # nothing left to remove
    assert kernel_cache.sweep(tmp_path / "missing") == 0


def test_configure_points_triton_at_a_per_machine_folder_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.delenv(kernel_cache.TRITON_CACHE_ENV, raising=False)
    folder = kernel_cache.configure(H200, root=tmp_path)
    assert folder.parent == tmp_path / "triton" and folder.is_dir()
    assert os.environ[kernel_cache.TRITON_CACHE_ENV] == str(folder)
    name = folder.name
    assert "NVIDIA_H200" in name and "sm90" in name and "driver13000" in name and "torch" in name and "triton" in name
    other = kernel_cache.cache_key({**H200, "device": "NVIDIA H100 80GB HBM3"})
    assert other != name  # another GPU (or driver, or version) never shares the folder


def test_configure_sweeps_the_folder_and_leaves_a_users_setting_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(kernel_cache.TRITON_CACHE_ENV, raising=False)
    folder = tmp_path / "triton" / kernel_cache.cache_key(H200)
    corrupt = _entry(folder, "ee", {"k.autotune.json": b"{not json"})
    assert kernel_cache.configure(H200, root=tmp_path) == folder
    assert not corrupt.exists()  # rebuilt by Triton when next needed, never read
    monkeypatch.setenv(kernel_cache.TRITON_CACHE_ENV, str(tmp_path / "mine"))
    assert kernel_cache.configure(H200, root=tmp_path) is None
    assert os.environ[kernel_cache.TRITON_CACHE_ENV] == str(tmp_path / "mine")
    monkeypatch.delenv(kernel_cache.TRITON_CACHE_ENV)
    monkeypatch.setattr(kernel_cache, "device_identity", lambda: None)  # no accelerator: Triton's own default
    assert kernel_cache.configure(root=tmp_path) is None and kernel_cache.TRITON_CACHE_ENV not in os.environ

"""Per-kernel timeline of one captured decode step: where a graph replay's device time goes.

``--profile`` (:mod:`anna_core.bench.profile`) times an *eager* step per model component; inside a
captured graph, with programmatic dependent launch, kernels overlap and the eager times no longer add
up to the replay. This module traces back-to-back replays of one bucket's graph (every row padding,
as :meth:`~anna_core.engine.cuda_graphs.DecodeGraphs.time_replay` times it) with the profiler's
device activity, splits the kernels into replays, and reports per kernel position of the step:

* ``dur``: the kernel's own start-to-end time (µs);
* ``exposed``: how far it moved the step's end, ``end - max(end of every earlier kernel)``, floored at
  0 (µs). The exposed times of a replay add up to the time since the previous replay ended (the gap
  between replays falls to the first kernel), so they say which kernels the step's length is made of;
  a kernel that overlaps its predecessor (PDL) shows ``exposed < dur``;
* ``grid`` / ``block`` / registers per thread / the profiler's estimated occupancy, to tell launches
  of the same kernel apart (e.g. the GEMVs of different projections).

Medians over the replays. ``python -m anna_core.bench.timeline --model-dir DIR`` runs it on a dummy
(random-weight) model; CUDA only (the trace needs the profiler's CUDA activity).

Padding rows all read and write one scratch state slot over a one-token context, so with several rows
a padded replay is cheaper than a served step (BENCHMARKS.md, seventh session).
:func:`served_timeline` therefore traces steps the engine serves (distinct state slots, real contexts)
and finds the captured step's kernel sequence in that trace (:func:`find_steps`); ``anna bench
--timeline`` reports it when it finds enough steps, the padded replays otherwise. In a served trace
the time between two steps' kernels (host work the device waited for, the eager sampler of a
``--logprobs`` step) is charged to the next step's first kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from anna_core.errors import AnnaError


@attrs.frozen
class KernelSpan:
    """One kernel of a trace: ``start`` / ``dur`` in µs, launch geometry and the profiler's resource info."""

    name: str
    start: float
    dur: float
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    registers: int | None = None
    occupancy: float | None = None

    @property
    def end(self) -> float:
        return self.start + self.dur


def kernels_from_trace(trace: dict[str, Any]) -> list[KernelSpan]:
    """The device kernels (``cat == "kernel"``) of a Chrome trace exported by ``torch.profiler``, by start."""
    spans = []
    for e in trace.get("traceEvents", []):
        if e.get("cat") != "kernel" or "dur" not in e:
            continue
        args = e.get("args", {})
        spans.append(KernelSpan(
            name=str(e.get("name", "?")), start=float(e["ts"]), dur=float(e["dur"]),
            grid=tuple(args.get("grid", ())), block=tuple(args.get("block", ())),
            registers=args.get("registers per thread"), occupancy=args.get("est. achieved occupancy %")))
    return sorted(spans, key=lambda s: s.start)


def split_replays(spans: Sequence[KernelSpan], replays: int) -> list[list[KernelSpan]]:
    """Cut a trace of ``replays`` identical back-to-back replays into one kernel list per replay.

    Raises:
        AnnaError: no kernels, a kernel count that is not a multiple of ``replays``, or replays whose
            kernel names differ.
    """
    if not spans:
        raise AnnaError("the profiler recorded no device kernels for the replays")
    if replays < 1 or len(spans) % replays:
        raise AnnaError(f"{len(spans)} kernels traced do not split into {replays} identical replays")
    n = len(spans) // replays
    steps = [list(spans[i * n:(i + 1) * n]) for i in range(replays)]
    names = [s.name for s in steps[0]]
    for step in steps[1:]:
        if [s.name for s in step] != names:
            raise AnnaError("the traced replays launched different kernels")
    return steps


def find_steps(spans: Sequence[KernelSpan], names: Sequence[str]) -> list[list[KernelSpan]]:
    """The non-overlapping windows of ``spans`` (by start) whose kernel names are exactly ``names`` (one
    captured step), in trace order; kernels between windows (another graph, eager work) are skipped."""
    n = len(names)
    want = list(names)
    out: list[list[KernelSpan]] = []
    i = 0
    while n and i + n <= len(spans):
        if spans[i].name == want[0] and [s.name for s in spans[i:i + n]] == want:
            out.append(list(spans[i:i + n]))
            i += n
        else:
            i += 1
    return out


def exposed_times(steps: Sequence[Sequence[KernelSpan]]) -> list[list[float]]:
    """Per replay, per kernel: ``end - max(end of every earlier kernel)`` floored at 0 (µs), earlier
    replays included: a replay's exposed times add up to the time from the previous replay's end to its
    own (the gap between replays is charged to its first kernel); the first kernel of the first replay
    counts from its own start."""
    out = []
    frontier = steps[0][0].start if steps and steps[0] else 0.0
    for step in steps:
        row = []
        for s in step:
            row.append(max(0.0, s.end - frontier))
            frontier = max(frontier, s.end)
        out.append(row)
    return out


def step_table(steps: Sequence[Sequence[KernelSpan]], skip_first: bool = True) -> list[dict[str, Any]]:
    """Per kernel position of the step: name, geometry, median ``dur`` and ``exposed`` (µs) over the
    replays (the first replay left out with ``skip_first`` and more than one replay: it starts cold)."""
    exposed = exposed_times(steps)
    if skip_first and len(steps) > 1:
        steps, exposed = steps[1:], exposed[1:]
    rows = []
    for i, first in enumerate(steps[0]):
        rows.append({
            "index": i, "name": first.name, "grid": list(first.grid), "block": list(first.block),
            "registers": first.registers, "occupancy": first.occupancy,
            "dur_us": statistics.median(s[i].dur for s in steps),
            "exposed_us": statistics.median(e[i] for e in exposed),
        })
    return rows


def by_kernel(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step table summed per (kernel name, grid): launches, ``dur`` and ``exposed`` µs per step,
    largest exposed first."""
    acc: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"launches": 0, "dur_us": 0.0, "exposed_us": 0.0})
    for r in rows:
        a = acc[(r["name"], str(r["grid"]))]
        a["launches"] += 1
        a["dur_us"] += r["dur_us"]
        a["exposed_us"] += r["exposed_us"]
    out = [{"name": k[0], "grid": k[1], **v} for k, v in acc.items()]
    return sorted(out, key=lambda r: -r["exposed_us"])


def trace_replays(replay: Callable[[], None], replays: int, synchronize: Callable[[], None]) -> list[KernelSpan]:
    """Profile ``replays`` back-to-back calls of ``replay`` (CUDA activity) and return their kernels."""
    from torch.profiler import ProfilerActivity, profile

    synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
        synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    return kernels_from_trace(trace)


def served_timeline(step: Callable[[], Any], steps: int, names: Sequence[str],
                    synchronize: Callable[[], None], min_steps: int = 3) -> list[dict[str, Any]]:
    """:func:`step_table` of the served decode steps traced while ``step`` (one engine step with its
    requests already decoding) is called ``steps`` times: the windows of the trace that launch the
    captured step's kernels ``names`` (from a padded replay of the same graph).

    Raises:
        AnnaError: fewer than ``min_steps`` such windows were traced.
    """
    found = find_steps(trace_replays(step, steps, synchronize), names)
    if len(found) < min_steps:
        raise AnnaError(f"the served steps' trace holds {len(found)} launches of the captured step, "
                        f"fewer than {min_steps}")
    return step_table(found)


def _short(name: str, width: int = 44) -> str:
    return name if len(name) <= width else name[:width - 1] + "~"


def format_timeline(rows: Sequence[dict[str, Any]], replay_ms: float | None = None) -> str:
    """The step table and its per-kernel summary as text."""
    span = sum(r["exposed_us"] for r in rows)
    busy = sum(r["dur_us"] for r in rows)
    lines = [f"step: {len(rows)} kernels, exposed sum {span:.1f} us, kernel time sum {busy:.1f} us"
             + (f", timed replay (padding rows) {replay_ms * 1e3:.1f} us" if replay_ms else "")]
    lines.append(f"{'#':>4} {'kernel':44} {'grid':>16} {'blk':>5} {'reg':>4} {'occ%':>5} {'dur':>7} {'exposed':>8}")
    for r in rows:
        occ = f"{r['occupancy']:.0f}" if isinstance(r["occupancy"], (int, float)) else "-"
        lines.append(f"{r['index']:4d} {_short(r['name']):44} {str(r['grid']):>16} {str(r['block'][:1]):>5} "
                     f"{r['registers'] if r['registers'] is not None else '-':>4} {occ:>5} "
                     f"{r['dur_us']:7.2f} {r['exposed_us']:8.2f}")
    lines.append("per kernel and grid (us per step): launches, dur, exposed")
    for r in by_kernel(rows):
        lines.append(f"  {_short(r['name'], 60):60} {r['grid']:>16} {r['launches']:4d} {r['dur_us']:8.1f} "
                     f"{r['exposed_us']:8.1f}")
    return "\n".join(lines)


def graph_timeline(graphs: Any, bucket: int, accel: Any, mode: str = "greedy", replays: int = 12) -> list[dict[str, Any]]:
    """:func:`step_table` of ``replays`` traced replays of bucket ``bucket``'s ``mode`` graph (rows all
    padding) of :class:`~anna_core.engine.cuda_graphs.DecodeGraphs` ``graphs``.

    Raises:
        AnnaError: no such graph, or the trace does not split into identical replays.
    """
    replay = graphs.padded_replay(bucket, mode)
    replay()
    return step_table(split_replays(trace_replays(replay, replays, accel.synchronize), replays))


def main(argv: Sequence[str] | None = None) -> int:
    """Load a dummy model, capture its decode graphs, trace replays of one bucket and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--mode", default="greedy", choices=["greedy", "sample", "logits"])
    ap.add_argument("--replays", type=int, default=12)
    ap.add_argument("--json", type=Path, default=None, help="also write the step table here")
    a = ap.parse_args(argv)

    from anna_core.bench.engine_bench import BenchSettings, build_engine
    from anna_core.loading import load_model

    loaded = load_model(a.model_dir, device="cuda", dtype=a.dtype, load_format="dummy")
    settings = BenchSettings(model_dir=a.model_dir, batch_size=a.batch_size, input_len=16, output_len=2)
    engine = build_engine(loaded, settings)
    graphs = engine.runner.graphs
    if graphs is None:
        raise AnnaError("no decode graphs were captured")
    bucket = graphs.bucket_for(a.batch_size)
    replay_ms = graphs.time_replay(bucket, a.mode)
    rows = graph_timeline(graphs, bucket, engine.runner.accel, a.mode, a.replays)
    print(f"{a.model_dir} bucket {bucket} mode {a.mode}")
    print(format_timeline(rows, replay_ms))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shared by the GPU experiment scripts: per-call device time of a list of calls captured in one CUDA graph."""
import statistics

import torch


def chain_time_us(calls, reps=3, replays=10):
    """Per-call microseconds of ``calls`` captured back to back ``reps`` times in one graph (after one eager
    run of each, which compiles and warms them): the median of ``replays`` timed replays."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            for c in calls:
                c()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts) / (reps * len(calls))

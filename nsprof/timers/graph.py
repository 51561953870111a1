"""CUDA-graph replay: launch overhead amortised; warm or cold L2 with the flush subtracted."""

from __future__ import annotations

from nsprof.timers.base import Flusher


def _capture(calls):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _replay_times_ns(graph, reps: int) -> list[float]:
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e6 for start, end in zip(starts, ends)]


def time_graph(fn, reps: int, l2: str, calls_per_graph: int) -> tuple[list[float], dict]:
    if l2 == "warm":
        graph = _capture([fn] * calls_per_graph)
        samples = [t / calls_per_graph for t in _replay_times_ns(graph, reps)]
        return samples, {"launch": "graph", "calls_per_graph": calls_per_graph}
    flush = Flusher()
    with_calls = _capture([step for _ in range(calls_per_graph) for step in (flush, fn)])
    flush_only = _capture([flush] * calls_per_graph)
    # Interleave the two graphs so that clock drift hits both alike; the flush's own time
    # is measured, not assumed.
    samples, flush_ns = [], []
    for _ in range(reps):
        total = _replay_times_ns(with_calls, 1)[0]
        flushes = _replay_times_ns(flush_only, 1)[0]
        flush_ns.append(flushes / calls_per_graph)
        samples.append((total - flushes) / calls_per_graph)
    flush_ns.sort()
    return samples, {
        "launch": "graph",
        "calls_per_graph": calls_per_graph,
        "flush_ns_median": flush_ns[len(flush_ns) // 2],
    }

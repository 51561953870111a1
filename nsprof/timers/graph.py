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


def graph_sampler(fn, l2: str, calls_per_graph: int):
    """Capture `fn` once: (sample(reps) -> per-call ns of `reps` replays, the conditions). Warm L2:
    one graph of `calls_per_graph` calls. Cold: the calls each after a flush, and a graph of the
    flushes alone replayed beside it and subtracted (interleaved, so that clock drift hits both
    alike; the flush's own time is measured, not assumed)."""
    if l2 == "warm":
        graph = _capture([fn] * calls_per_graph)

        def warm(reps: int) -> list[float]:
            return [t / calls_per_graph for t in _replay_times_ns(graph, reps)]

        return warm, {"launch": "graph", "calls_per_graph": calls_per_graph}
    flush = Flusher()
    with_calls = _capture([step for _ in range(calls_per_graph) for step in (flush, fn)])
    flush_only = _capture([flush] * calls_per_graph)
    conditions = {"launch": "graph", "calls_per_graph": calls_per_graph}

    def cold(reps: int) -> list[float]:
        samples, flush_ns = [], []
        for _ in range(reps):
            total = _replay_times_ns(with_calls, 1)[0]
            flushes = _replay_times_ns(flush_only, 1)[0]
            flush_ns.append(flushes / calls_per_graph)
            samples.append((total - flushes) / calls_per_graph)
        conditions["flush_ns_median"] = sorted(flush_ns)[len(flush_ns) // 2]
        return samples

    return cold, conditions


def time_graph(fn, reps: int, l2: str, calls_per_graph: int) -> tuple[list[float], dict]:
    sample, conditions = graph_sampler(fn, l2, calls_per_graph)
    return sample(reps), conditions

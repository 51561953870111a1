"""Named fast-timer methods for `nsprof validate`: nsprof's own and the tuners' own."""

from __future__ import annotations

from collections.abc import Callable

# name -> (nsprof timer, L2 state)
OWN = {
    "event": ("event", "warm"),
    "event_cold": ("event", "cold"),
    "cupti": ("cupti", "warm"),
    "cupti_cold": ("cupti", "cold"),
    "graph_warm": ("graph", "warm"),
    "graph_cold": ("graph", "cold"),
}
# Measured round-robin over the configs, in rounds (nsprof.timers.interleave): name -> (timer, L2 state)
INTERLEAVED = {
    "graph_warm_interleaved": ("graph", "warm"),
    "graph_cold_interleaved": ("graph", "cold"),
    "cupti_interleaved": ("cupti", "warm"),
    "cupti_cold_interleaved": ("cupti", "cold"),
}
FAMILIES = {
    "event": ["event", "event_cold"],
    "cupti": ["cupti", "cupti_cold"],
    "graph": ["graph_warm", "graph_cold"],
    "interleaved": list(INTERLEAVED),
}
# The warm event and CUPTI timers alone: their own names are their families'
WARM_ALONE = {"event_warm": "event", "cupti_warm": "cupti"}
EXTERNAL = ("tilelang_event", "tilelang_cupti", "tilelang_cudagraph", "triton_do_bench", "triton_cudagraph")
# The tuners' own timers' L2 state (docs/timers.md): TileLang's event and cupti backends and
# triton.testing.do_bench flush L2 before each call; the CUDA-graph ones never do.
EXTERNAL_L2 = {
    "tilelang_event": "cold",
    "tilelang_cupti": "cold",
    "tilelang_cudagraph": "warm",
    "triton_do_bench": "cold",
    "triton_cudagraph": "warm",
}
# How each method launches: graph replay or a direct call.
GRAPH_METHODS = (
    "graph_warm",
    "graph_cold",
    "graph_warm_interleaved",
    "graph_cold_interleaved",
    "tilelang_cudagraph",
    "triton_cudagraph",
)


def l2_state(name: str) -> str | None:
    """ "cold" or "warm": the L2 state a timer method measures in (None: not a known method)."""
    own = {**OWN, **INTERLEAVED}
    return own[name][1] if name in own else EXTERNAL_L2.get(name)


def conditions(name: str) -> str:
    """How a timer method measures, in words: the card's own clocks, its L2 state, its launch path."""
    l2 = l2_state(name)
    cache = {"cold": "L2 flushed before each call", "warm": "L2 warm"}.get(l2 or "", "L2 state unknown")
    launch = "graph replay" if name in GRAPH_METHODS else "direct launch"
    tool = "in-process" if name in OWN else "the tuner's own timer"
    if name in INTERLEAVED:
        tool = "in-process, the configs interleaved in rounds (each config's median of its round medians)"
    return f"{tool}, the card's own clocks, {cache}, {launch}"


def fast_timer_label(timer: str, stat: str, samples) -> str:
    """How a fast timer of tune (--backend, --prescreen: cupti, graph, event and their _cold variants) took a
    ranking's numbers, in words: its statistic of how many samples, its L2 state and launch path."""
    from nsprof.truth import TIMER_BACKENDS

    how = conditions(TIMER_BACKENDS.get(timer, timer))  # tune's name (graph) or the method's (graph_warm)
    return f"fast timer {timer}, {stat} of {samples} samples, {how}"


def expand(names: list[str]) -> list[str]:
    """`event,cupti,graph` -> every variant of each family; exact names pass through (event_warm and
    cupti_warm: the warm one alone, named event and cupti)."""
    out: list[str] = []
    for name in names:
        for item in FAMILIES.get(name, [WARM_ALONE.get(name, name)]):
            if item not in OWN and item not in INTERLEAVED and item not in EXTERNAL:
                raise ValueError(f"unknown timer {item!r}")
            if item not in out:
                out.append(item)
    return out


def available_external() -> list[str]:
    import importlib.util

    found = []
    if importlib.util.find_spec("tilelang") is not None:
        found += ["tilelang_event", "tilelang_cupti", "tilelang_cudagraph"]
    if importlib.util.find_spec("triton") is not None:
        found += ["triton_do_bench", "triton_cudagraph"]
    return found


def run_method(name: str, fn: Callable[[], object], reps: int) -> dict:
    """Measure `fn` with one named method; returns {median_ns, samples_ns?, conditions}."""
    if name in OWN:
        from nsprof.timers import measure

        timer, l2 = OWN[name]
        result = measure(fn, timer=timer, reps=reps, l2=l2)
        return {"median_ns": result.median_ns, "min_ns": result.min_ns, "conditions": result.conditions}
    if name.startswith("tilelang_"):
        from tilelang.profiler.bench import do_bench

        backend = name.split("_", 1)[1]
        ms = do_bench(fn, backend=backend, return_mode="median")
        return {"median_ns": float(ms) * 1e6, "conditions": {"tool": f"tilelang do_bench backend={backend}"}}
    import triton.testing

    if name == "triton_do_bench":
        ms = triton.testing.do_bench(fn, return_mode="median")
    else:
        ms = triton.testing.do_bench_cudagraph(fn, return_mode="median")
    return {"median_ns": float(ms) * 1e6, "conditions": {"tool": f"triton.testing.{name[7:]}"}}

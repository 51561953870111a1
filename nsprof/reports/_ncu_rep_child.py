"""Child process: read one .ncu-rep with NVIDIA's ncu_report, print its results as JSON.

    python _ncu_rep_child.py REPORT NCU_REPORT_FOLDER MAX_MEMORY_BYTES METRICS_JSON

NVIDIA's loader is native code, and a corrupt report can kill the process that loads it
(fuzzing found inputs that fail a protobuf CHECK and abort) or make it allocate without
bound, so nsprof never loads a report in its own process: nsprof.reports.ncu_rep runs this
file and turns a crash, a timeout or a memory limit into a ReportError.

Standalone on purpose: it imports nothing from nsprof or pandas, so it starts fast and
cannot pick up another nsprof than the parent's. Output on the original stdout, one JSON
object: {"ranges": n, "actions": [...]} or {"error": "one line"}. Anything the native
library prints goes to stderr.
"""

import json
import os
import sys
from pathlib import Path


def _text(value) -> str:
    # SWIG hands back undecodable bytes as lone surrogates; they break UTF-8 encoders later.
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _actions(context, metric_names: list[str]) -> list[dict]:
    actions = []
    for range_index in range(context.num_ranges()):
        report_range = context.range_by_idx(range_index)
        for action_index in range(report_range.num_actions()):
            action = report_range.action_by_idx(action_index)
            metrics = {}
            for name in metric_names:
                metric = action.metric_by_name(name)
                if metric is not None:
                    metrics[name] = float(metric.as_double())
            push_pop: dict[str, list[str]] = {}
            start_end: dict[str, list[str]] = {}
            nvtx = action.nvtx_state()
            if nvtx is not None:
                for domain_id in nvtx.domains():
                    info = nvtx.domain_by_id(domain_id)
                    name = _text(info.name())
                    pushed = [_text(r) for r in info.push_pop_ranges()]
                    started = [_text(r) for r in info.start_end_ranges()]
                    if pushed:
                        push_pop[name] = pushed
                    if started:
                        start_end[name] = started
            actions.append(
                {
                    "name": _text(action.name()),
                    "full_name": _text(action.name(action.NameBase_DEMANGLED)),
                    "workload_type": int(action.workload_type()),
                    "metrics": metrics,
                    "push_pop": push_pop,
                    "start_end": start_end,
                }
            )
    return actions


def main(argv: list[str]) -> int:
    report, folder, max_memory, metric_names = argv[0], argv[1], int(argv[2]), json.loads(argv[3])
    if max_memory > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        # Run by path, this file's folder (nsprof/reports) leads sys.path; its modules
        # (names, nsys, ...) must not shadow anything ncu_report imports.
        del sys.path[0]
    if folder:
        sys.path.append(folder)
    try:
        import ncu_report
    except ImportError as exc:
        json.dump({"error": f"cannot import ncu_report from {folder or 'sys.path'}: {exc}"}, results)
        return 0
    try:
        context = ncu_report.load_report(report)
        if context is None:
            output = {"ranges": 0, "actions": []}
        else:
            output = {"ranges": int(context.num_ranges()), "actions": _actions(context, metric_names)}
    except MemoryError:
        output = {"error": f"ran out of memory (limit {max_memory} bytes)"}
    except Exception as exc:  # noqa: BLE001 - the SWIG layer raises bare RuntimeError/Exception types
        output = {"error": f"ncu_report could not load it ({_text(exc)})"}
    json.dump(output, results)
    results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""How ncu's replay leaves L2 before the pass that counts it (run on a GPU machine with ncu):

    python3 scripts/probe_ncu_l2_replay.py OUT_DIR

A 1x1024 @ 1024x1024 fp16 GEMM (its 2 MiB of weights fit L2 many times over) runs 4 times, each in
an NVTX range `probe`, after the cold timers' flush (a 256 MiB buffer zeroed) or after nothing. ncu
counts its L2 hit rate in six ways: kernel replay (ncu's default: it saves every buffer the kernel can
reach before its first pass) or application replay (the program run again for each pass: nothing
saved), with --cache-control none or all. Each report is kept as OUT_DIR/<variant>.ncu-rep and the
hit rate, the passes and the bytes ncu backed up are printed per variant, read with ncu_report.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

VARIANTS = {  # name: (flush before each launch, --replay-mode, --cache-control, metrics)
    "kernel_none_flush": (True, "kernel", "none", "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"),
    "kernel_none_flush_hit_only": (True, "kernel", "none", "lts__t_sector_hit_rate.pct"),
    "app_none_flush": (True, "application", "none", "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"),
    "kernel_all": (False, "kernel", "all", "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"),
    "kernel_none_noflush": (False, "kernel", "none", "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"),
    "app_none_noflush": (False, "application", "none", "gpu__time_duration.sum,lts__t_sector_hit_rate.pct"),
}
READ = (
    "lts__t_sector_hit_rate.pct",
    "profiler__replayer_passes",
    "profiler__replayer_bytes_mem_backed_up.sum",
)


def program(flush: bool) -> None:
    import torch

    x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    buffer = torch.empty(256 << 18, dtype=torch.int32, device="cuda")  # 256 MiB, as the timers' flush
    for _ in range(3):
        x @ w
    torch.cuda.synchronize()
    for _ in range(4):
        if flush:
            buffer.zero_()
        torch.cuda.nvtx.range_push("probe")
        x @ w
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def read(report: Path) -> list[dict]:
    import ncu_report

    context = ncu_report.load_report(str(report))
    rows = []
    for r in range(context.num_ranges()):
        for a in range(context.range_by_idx(r).num_actions()):
            action = context.range_by_idx(r).action_by_idx(a)
            names = set(action.metric_names())
            rows.append({m: action.metric_by_name(m).value() for m in READ if m in names})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--program", choices=("flush", "none"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.program:
        program(args.program == "flush")
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsprof.host.tools import find_ncu
    from nsprof.reports.ncu_rep import ncu_report_folder

    sys.path.insert(0, ncu_report_folder())
    ncu = str(find_ncu().path)
    args.out.mkdir(parents=True, exist_ok=True)
    table = {}
    for name, (flush, replay, cache, metrics) in VARIANTS.items():
        base = args.out / name
        cmd = [ncu, "--nvtx", "--nvtx-include", "probe/", "--replay-mode", replay, "--cache-control", cache,
               "--metrics", metrics, "--force-overwrite", "--export", str(base),
               sys.executable, __file__, str(args.out), "--program", "flush" if flush else "none"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        (args.out / f"{name}.log").write_text(done.stdout + done.stderr)
        report = base.with_suffix(".ncu-rep")
        table[name] = read(report) if done.returncode == 0 and report.exists() else f"exit {done.returncode}"
        print(name, json.dumps(table[name]), flush=True)
    (args.out / "probe.json").write_text(
        json.dumps({"ncu": shutil.which(ncu) or ncu, "variants": table}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Draws the plots and report pages shown in docs/, through nsprof's own command line, and a
screenshot of each page in headless Chromium (Debian's `chromium`), so that a person can look at
every one:

    python3 scripts/draw_docs.py [--out docs/pictures]

- analyze_plot.png: `nsprof analyze tests/fixtures/fixture.sqlite --plot` (a real nsys report, H200);
- compare_plot.png: `nsprof analyze --compare` of the seed's ncu CSV and nsys report (H200), B/A per range;
- validate_plot.png, validate_page.png: the recorded H200 validate run of the seed GEMM
  (benchmarks/results/validate_seed_gemm.json) read back by `nsprof results FILE.json`;
- tune_plot.png, tune_page.png: `nsprof tune --truth ncu,nsys` of an 8-config space under the
  stand-in profilers of tests/standins.py (no GPU: the numbers are the stand-ins', not a kernel's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins.py"
# 8 configs; ncu and nsys rank them differently (ns_at: the value at nsys's conditions), with noise
TARGET = """
import nsprof.space
NCU = [5300, 5200, 6100, 5600, 7400, 5250, 9000, 6600]
NSYS = [3600, 3700, 4100, 3650, 5000, 3900, 6800, 4300]
configs = [
    {"block_N": 32 * (1 + i % 4), "block_K": 64 * (1 + i // 4), "num_stages": 2 + i % 2,
     "ns": NCU[i], "ns_sigma": 0.01, "seed": 1, "ns_at": {"none-none": NSYS[i]}}
    for i in range(8)
]
space = nsprof.space.Space(configs=configs, build=lambda c: (lambda: None), device="cpu")
"""


def nsprof(*args: str, cwd: Path, standins: bool = False) -> None:
    program = [str(STANDINS)] if standins else ["-m", "nsprof"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, *program, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"nsprof {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")


def screenshot(page: Path, png: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("no chromium on PATH (apt-get install chromium)")
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--hide-scrollbars", "--window-size=1400,1800", f"--screenshot={png}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "pictures")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nsprof-docs-") as tmp:
        work = Path(tmp)
        nsprof("analyze", "tests/fixtures/fixture.sqlite", "--plot", str(out / "analyze_plot.png"), cwd=ROOT)
        compare = [
            "analyze",
            "--compare",
            "tests/fixtures/fixture_node_raw.csv",
            "tests/fixtures/fixture.sqlite",
        ]
        nsprof(*compare, "--plot", str(out / "compare_plot.png"), cwd=ROOT)
        record = ROOT / "benchmarks/results/validate_seed_gemm.json"
        nsprof("results", str(record), "--plot", str(out / "validate_plot.png"), "--html", "v.html", cwd=work)
        (work / "t.py").write_text(TARGET)
        tune = [
            "tune",
            "t.py:space",
            "--truth",
            "ncu,nsys",
            "--mode",
            "direct",
            "--no-feed-back",
            "--no-store",
        ]
        nsprof(*tune, "--plot", str(out / "tune_plot.png"), "--html", "t.html", cwd=work, standins=True)
        screenshot(work / "v.html", out / "validate_page.png")
        screenshot(work / "t.html", out / "tune_page.png")
    for name in sorted(p.name for p in out.glob("*.png")):
        print(out / name)


if __name__ == "__main__":
    main()

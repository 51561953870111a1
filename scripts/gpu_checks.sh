#!/usr/bin/env bash
# Every GPU-side check of nsprof, for a GPU machine (the H200 here):
#   source .device/setup.sh && bash scripts/gpu_checks.sh OUTDIR [basic|bench|all]
# basic: doctor, the `gpu` pytest suite, `nsprof profile` of the seed GEMM space under ncu and nsys.
# bench: scripts/bench_profile.py and `nsprof validate` of the seed space (plot + JSON).
# Logs and results go under OUTDIR; the last lines printed are a short summary.
set -u
out=${1:?usage: gpu_checks.sh OUTDIR [basic|bench|all]}
what=${2:-all}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
space=examples/gemm_tilelang.py:space
summary=()
if [ "$what" = basic ] || [ "$what" = all ]; then
  python3 -m nsprof doctor > "$out/doctor.txt" 2>&1; summary+=("doctor rc=$?")
  python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$out/pytest_gpu.txt" 2>&1
  summary+=("pytest gpu rc=$? :: $(tail -1 "$out/pytest_gpu.txt")")
  for backend in ncu nsys; do
    /usr/bin/time -f "%e s wall" python3 -m nsprof profile $space --backend $backend --mode both \
      --csv "$out/profile_$backend.csv" > "$out/profile_$backend.txt" 2> "$out/profile_$backend.err"
    summary+=("profile $backend rc=$? :: $(tail -1 "$out/profile_$backend.txt") :: $(tail -1 "$out/profile_$backend.err")")
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 scripts/bench_profile.py --out "$out/bench_profile.json" > "$out/bench_profile.txt" 2>&1
  summary+=("bench_profile rc=$?")
  python3 -m nsprof validate examples/seed_gemm.py:space --plot "$out/validate_seed.png" \
    --save "$out/validate_seed.json" > "$out/validate_seed.txt" 2> "$out/validate_seed.err"
  summary+=("validate rc=$?")
fi
printf '%s\n' "${summary[@]}"

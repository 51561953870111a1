#!/usr/bin/env bash
# The seed space's tables (profile under ncu and nsys, tune, validate) from two checkouts, run in
# turn on one GPU, so that a redesign can be shown to leave the numbers within the tools' noise:
#   git archive <old-commit> | tar -x -C .before     # an older checkout beside this one
#   source .device/setup.sh && bash scripts/seed_tables.sh .before .
# Writes one text file per command and checkout under $OUT/seed (tarred to $OUT/seed.tgz after each).
set -u
OUTROOT=${OUT:-/tmp/nsprof-seed}; R=$OUTROOT/seed; mkdir -p "$R"
SITE=${NSPROF_SITE:-/tmp/nsprof-site}
T=examples/seed_gemm.py:space
run() { local tag=$1 dir=$2 name=$3; shift 3; local a=$(date +%s)
  (cd "$dir" && PYTHONPATH="$SITE:$PWD" timeout 150 python3 -m nsprof "$@") > "$R/$name.$tag.txt" 2>&1
  echo "$name $tag rc=$? $(( $(date +%s) - a )) s" | tee -a "$R/index.txt"
  tar -czf "$OUTROOT/seed.tgz" -C "$OUTROOT" seed; }
for cmd in profile_ncu profile_nsys tune validate; do
  i=0
  for dir in "$@"; do
    i=$((i + 1))
    case $cmd in
      profile_ncu) run "$i" "$dir" "$cmd" profile "$T" --backend ncu --mode both ;;
      profile_nsys) run "$i" "$dir" "$cmd" profile "$T" --backend nsys --mode both ;;
      tune) run "$i" "$dir" "$cmd" tune "$T" --backend nsys --mode graph --no-feed-back ;;
      validate) run "$i" "$dir" "$cmd" validate "$T" --truth ncu,nsys --mode graph ;;
    esac
  done
done

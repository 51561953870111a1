#!/usr/bin/env bash
# GPU steps, each bounded, results in one tarball ($OUT/r.tgz, rewritten after every step):
#   source .device/setup.sh && bash scripts/gpu_steps.sh STEP...
# Steps (in the order worth running; seconds are rough H200 figures with cold caches):
#   serve         scripts/bench_serve.py: plain tune vs tune against nsprof serve (~150 s)
#   tune          scripts/bench_tune.py --warm --rounds 1: TileLang's autotune vs nsprof tune (~250 s)
#   tune3         the same with --rounds 3 (best, median and worst of 3; ~350 s)
#   serve_tl      scripts/bench_serve.py for the TileLang GEMM target (a re-tune through nsprof serve), 3 rounds
#   serve_tr      the same for the Triton matmul of examples/matmul_triton.py
#   moe_own       scripts/bench_moe.py: Triton's own autotune of 256 configs x 4 shapes from a cold cache;
#   moe_nsys      moe_nsys and moe_ncu: nsprof tune of it under nsys, ncu. Each adds its part to $OUT's
#   moe_ncu       bench_moe.json (started from benchmarks/results/bench_moe.json): copy it back over that
#                 file (and commit) before a later call. moe_ncu_prescreen: ncu after --prescreen graph
#                 --top 8 (ncu measures each shape's best 8 by the graph timer).
#   tune3_add     the same for the elementwise add of examples/autotune_add_tilelang.py (--kernels add)
#   shapes        scripts/bench_shapes.py --rounds 1: four shapes vs one (Triton, nsys)
#   fixed         scripts/bench_fixed_cost.py, nsys and ncu, compile ahead (~200 s)
#   gpu_shapes    pytest tests/test_gpu_shapes.py (Triton, then TileLang: 72 TileLang points)
#   probe_keys    scripts/probe_tilelang_keys.py: TileLang's cache key per shape in three process histories
#   shapes_short  shapes, bounded at 270 s
#   tune_short    tune, bounded at 350 s
#   tl_keys       pytest tests/test_tilelang_cache_keys.py (TileLang's cache keys shape after shape)
#   gpu_shapes_tl the TileLang half of gpu_shapes alone
#   gpu_serve     pytest -m gpu -k serve
#   gpu_faults    pytest tests/test_gpu_faults.py tests/test_gpu_integrations.py (~400 s)
#   gpu_rest      pytest the other gpu tests: profile, signals, timers, identity, Triton's compile ahead (~200 s)
#   gpu_shapes_tr the Triton half of gpu_shapes alone
#   resume_ncu    the faulty space's resume under ncu alone
#   compile_fail  nsprof profile of two TileLang configs that do not compile, under nsys:
#                 the configs' compile errors, exit 2, not a report-reading error
#   gpu_compose   pytest tests/test_gpu_compose.py: Triton and TileLang at 4 shapes, --truth ncu,nsys:
#                 adaptive reps, probes and the tuner's own pick per shape
#   gpu_compose_tl the TileLang half of gpu_compose alone
#   gpu_compose_tr the Triton half of gpu_compose alone
#   gpu_serve_tl  the GPU test of a served TileLang tune and re-tune (pick and feed-back under the lease),
#                 PYTHONPATH set
#   spaces        the regret suite's Triton spaces (examples/{rmsnorm,layernorm,add,reduce,attention,swiglu,
#                 softmax_shapes}_triton.py),
#                 each profiled once under nsys at every shape: do they compile, run and check out
#   interleaved   validate of the softmax space with the plain and the interleaved graph and CUPTI timers,
#                 nsys as truth (repeated), the JSON kept: the interleaved timers' clock and throttle check
#   timer_fixture scripts/capture_fixtures.py --only-timers: the plain and interleaved timers' result lines
#                 (timers<i>.jsonl, to copy to tests/fixtures/), their SM clocks and throttle counts, as written
#   gpu_l2        the gpu test of validate --l2-check (the seed GEMM)
#   l2_fixture    scripts/capture_fixtures.py --only-l2: the L2 check's two ncu reports
#   probe_l2      scripts/probe_ncu_l2_replay.py: a GEMM's L2 hit rate under ncu's kernel and application replay,
#                 after the timers' flush or none (~90 s)
#   gpu_timers    pytest tests/test_gpu_timers.py (the in-process timers on the GPU)
#   regret        scripts/bench_regret.py over the two single-shape spaces (a cell each; the whole suite,
#                 11 spaces at up to 3 shapes each, is longer than one call: run it in parts)
#   regret_suite  the whole regret suite, resumed: the spaces benchmarks/results/bench_regret.json (commit it
#                 once it exists: a committed file travels with the checkout) does not hold yet, as many as
#                 fit; copy $OUT's bench_regret.json back over it and run the step again until every space is in
#   flips         fresh tune runs (scripts/bench_decisions.py, the seed, softmax and 512³ matmul spaces, both
#                 truths), added to benchmarks/results/bench_decisions_flips_second_process.json (commit it):
#                 copy $OUT's flips.json back over it; each call adds what fits, toward the goal's 200 runs.
#                 (bench_decisions_flips.json holds the runs before close winners were checked in a
#                 second process)
#   dask          scripts/bench_dask.py on one GPU: --devices 0 against no Dask (wall, ranking); needs the
#                 wheels of dask, distributed, partd, locket, zict, tblib, tornado, cryptography, cffi and
#                 pycparser in .whl (pip download, as the device notes say). .device and .whl together,
#                 with the checkout, are over the 64 MiB a call carries: carry .device-dask instead, made by
#                 scripts/pack_device_dask.sh, and run `source .device-dask/setup.sh && WHL=.device-dask/whl
#                 bash scripts/gpu_steps.sh dask`
#   dask_two      the same with --two, on a machine of two GPUs (nvidia-h200-x2)
#   aa            scripts/bench_aa.py --runs 4: one config entered twice must be called tied (~500 s)
#   probe_tc      scripts/probe_triton_compile.py: 64 MoE configs compiled serially, by Triton's async compile
#                 in threads, or in processes, each from a cold cache (~120 s): which pool a Triton compile
#                 step would need
#   probe_tc_jobs the async compile of 128 MoE configs in 8 and in 16 threads, each from a cold cache: whether
#                 the compile pool's cap of 8 threads leaves the H200's 16 cores half idle
#   moe_ncu_logs  nsprof tune of the MoE space under ncu from a cold Triton cache, its work folder (status lines,
#                 worker logs; not the reports) kept: whether the worker compiled ahead, and if not, why
#   ahead         a standalone TileLang tune under ncu, then nsys, its work folder's status files and what runs
#                 after it: the adaptive sessions' workers started ahead (nsprof.session.ahead), and none left
#   truths        a TileLang tune under --truth ncu,nsys: nsys's first pass and the probes in workers started
#                 ahead (their status files' process/target/device times, each run's phases, the workers' own
#                 lines: "no channel for the GPU lock" would say the lock handover did not arrive)
#   kept          a standalone TileLang tune under ncu, then nsys, in temporary folders: what a folder kept after
#                 the run holds (a clean run's is removed)
#   ends          a standalone TileLang tune under nsys whose work folder (status lines with their
#                 times, logs; not the reports) comes back: where the session's ends go
set -u
OUTROOT=${OUT:-/tmp/nsprof-gpu}; R=$OUTROOT/r; mkdir -p "$R"
pack() { tar -czf "$OUTROOT/r.tgz" -C "$OUTROOT" r 2>/dev/null; }
step() { local name=$1 limit=$2; shift 2; echo "== $name (limit ${limit}s)"; local a=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.txt" 2>&1; local rc=$?; echo "rc=$rc after $(( $(date +%s) - a )) s" | tee -a "$R/$name.txt"
  tail -15 "$R/$name.txt"; pack; }
PYTEST="python3 -m pytest -p no:cacheprovider -v --durations=10"
for s in "$@"; do
  case $s in
    serve) step serve 300 python3 scripts/bench_serve.py --out "$R/bench_serve.json" ;;
    serve_tl) step serve_tl 400 python3 scripts/bench_serve.py --rounds 3 --target examples/autotune_tilelang.py:space \
            --out "$R/bench_serve_tilelang.json" ;;
    serve_tr) step serve_tr 300 python3 scripts/bench_serve.py --rounds 3 --target examples/matmul_triton.py:space \
            --out "$R/bench_serve_triton.json" ;;
    tune) step tune 400 python3 scripts/bench_tune.py --warm --rounds 1 \
            --contenders tilelang_event,nsprof_nsys_graph,nsprof_ncu_graph --out "$R/bench_tune_warm.json" ;;
    shapes) step shapes 500 python3 scripts/bench_shapes.py --rounds 1 --out "$R/bench_shapes.json" ;;
    fixed) step fixed 300 python3 scripts/bench_fixed_cost.py --runs 2 --out "$R/bench_fixed_cost.json" ;;
    gpu_shapes) step gpu_shapes 580 $PYTEST -m gpu tests/test_gpu_shapes.py ;;
    probe_keys) step probe_keys 150 python3 scripts/probe_tilelang_keys.py ;;
    tune3) step tune 560 python3 scripts/bench_tune.py --warm --rounds 3 \
            --contenders tilelang_event,nsprof_nsys_graph,nsprof_ncu_graph --out "$R/bench_tune_warm.json" ;;
    tune3_add) step tune_add 560 python3 scripts/bench_tune.py --warm --rounds 3 --kernels add \
            --contenders tilelang_event,nsprof_nsys_graph,nsprof_ncu_graph --out "$R/bench_tune_warm_add.json" ;;
    moe_own|moe_nsys|moe_ncu|moe_ncu_prescreen) W=${s/moe_/}; [ "$W" = own ] && W=triton_own || W=nsprof_$W
           [ -f "$R/bench_moe.json" ] || cp benchmarks/results/bench_moe.json "$R/" 2>/dev/null
           step "$s" 590 python3 scripts/bench_moe.py --contenders "$W" --timeout 580 --out "$R/bench_moe.json" ;;
    tune_short) step tune 350 python3 scripts/bench_tune.py --warm --rounds 1 \
            --contenders tilelang_event,nsprof_nsys_graph,nsprof_ncu_graph --out "$R/bench_tune_warm.json" ;;
    tl_keys) step tl_keys 200 $PYTEST tests/test_tilelang_cache_keys.py ;;
    shapes_short) step shapes 270 python3 scripts/bench_shapes.py --rounds 1 --out "$R/bench_shapes.json" ;;
    gpu_shapes_tl) step gpu_shapes_tl 420 $PYTEST -m gpu -k tilelang tests/test_gpu_shapes.py ;;
    gpu_serve) step gpu_serve 400 $PYTEST -m gpu -k serve tests ;;
    gpu_faults) step gpu_faults 580 $PYTEST -m gpu tests/test_gpu_faults.py tests/test_gpu_integrations.py ;;
    gpu_rest) step gpu_rest 400 $PYTEST -m gpu tests/test_gpu_profile.py tests/test_gpu_signals.py \
                tests/test_gpu_timers.py tests/test_gpu_identity.py tests/test_gpu_triton_compile.py ;;
    gpu_shapes_tr) step gpu_shapes_tr 420 $PYTEST -m gpu -k "not tilelang" tests/test_gpu_shapes.py ;;
    resume_ncu) step resume_ncu 300 $PYTEST -m gpu -k "resume and ncu" tests/test_gpu_faults.py ;;
    compile_fail) step compile_fail 200 python3 -m nsprof profile examples/gemm_tilelang.py:space --backend nsys \
                    --configs 0,1 --work-dir "$R/compile_fail" ;;
    gpu_compose_tl) step gpu_compose_tl 590 $PYTEST -m gpu -k tilelang tests/test_gpu_compose.py ;;
    gpu_compose_tr) step gpu_compose_tr 300 $PYTEST -m gpu -k "not tilelang" tests/test_gpu_compose.py ;;
    gpu_serve_tl) step gpu_serve_tl 300 $PYTEST -m gpu -k "tilelang_tune" tests/test_gpu_serve.py ;;
    probe_tc) step probe_tc 400 python3 scripts/probe_triton_compile.py --out "$R/probe_triton_compile.json" ;;
    probe_tc_jobs) for j in 8 16; do step "probe_tc_$j" 300 python3 scripts/probe_triton_compile.py --methods async \
                     --configs 128 --jobs "$j" --out "$R/probe_triton_compile_jobs$j.json"; done ;;
    ahead) for b in ncu nsys; do step "ahead_$b" 240 bash -c "python3 -m nsprof tune examples/autotune_tilelang.py:space \
             --backend $b --mode graph --no-store --no-feed-back --no-tuner-pick --json --work-dir $R/ahead_$b \
             > $R/ahead_$b.json; rc=\$?; ls -la $R/ahead_$b; for f in $R/ahead_$b/*.status; do echo == \$f; \
             grep -v '^at ' \$f | head -4; grep -E '^at .* (process|target|device)' \$f; done; \
             grep -h 'NSPROF== worker' $R/ahead_$b/*.log; \
             ps -eo pid,etimes,cmd | grep -E 'nsys|ncu|nsprof.worker' | grep -v grep; \
             rm -f $R/ahead_$b/*.nsys-rep $R/ahead_$b/*.sqlite $R/ahead_$b/*.ncu-rep; exit \$rc"; done ;;
    truths) step truths 400 bash -c "python3 -m nsprof tune examples/autotune_tilelang.py:space --truth ncu,nsys \
              --mode graph --no-store --no-feed-back --no-tuner-pick --json --work-dir $R/truths > $R/truths.json; \
              rc=\$?; for f in $R/truths/*.status; do echo == \$f; grep -E '^at .* (process|target|device|end)' \$f; \
              done; grep -h -E 'phases|NSPROF== worker' $R/truths/*.log; \
              rm -f $R/truths/*.nsys-rep $R/truths/*.sqlite $R/truths/*.ncu-rep; exit \$rc" ;;
    kept) for b in ncu nsys; do step "kept_$b" 150 bash -c "python3 -m nsprof tune examples/autotune_tilelang.py:space \
            --backend $b --mode graph --no-store --no-feed-back --no-tuner-pick --json > $R/kept_$b.json; rc=\$?; \
            for d in \$(grep -o '/tmp/nsprof-[A-Za-z0-9_]*' $R/kept_$b.json | sort -u); do echo == \$d; ls -la \$d; \
            grep -v '^at ' \$d/*.status | grep -E 'fail|abort' | head; grep -h phases \$d/*.log; done; exit \$rc"; done ;;
    ends) step ends 200 bash -c "python3 -m nsprof tune examples/autotune_tilelang.py:space --backend nsys \
            --mode graph --budget-s 0 --no-store --no-feed-back --no-tuner-pick --json --work-dir $R/ends \
            > $R/ends.json; rc=\$?; rm -f $R/ends/*.nsys-rep $R/ends/*.sqlite $R/ends/*.qdstrm; exit \$rc" ;;
    moe_ncu_logs) step moe_ncu_logs 590 bash -c "TRITON_CACHE_DIR=$R/moe_triton python3 -m nsprof tune \
            examples/moe_triton.py:space --mode graph --no-store --no-tuner-pick --backend ncu --json \
            --work-dir $R/moe_ncu > $R/moe_ncu.json; rc=\$?; rm -rf $R/moe_triton; find $R/moe_ncu \
            -name '*.ncu-rep' -delete; exit \$rc" ;;
    spaces) step spaces 220 bash -c 'for f in rmsnorm layernorm add reduce attention swiglu softmax_shapes; do
            echo "== $f"; python3 -m nsprof profile examples/${f}_triton.py:space --backend nsys --mode direct \
            --reps 2 2>&1 | tail -25; done' ;;
    interleaved) step interleaved 300 python3 -m nsprof validate examples/softmax_triton.py:space \
                   --timers graph,interleaved --no-external --truth nsys --mode graph \
                   --save "$R/validate_softmax_interleaved.json" ;;
    timer_fixture) step timer_fixture 300 python3 scripts/capture_fixtures.py "$R/timer_fixture" --only-timers ;;
    gpu_timers) step gpu_timers 200 $PYTEST -m gpu tests/test_gpu_timers.py ;;
    gpu_l2) step gpu_l2 580 $PYTEST -m gpu tests/test_gpu_l2.py ;;
    probe_l2) step probe_l2 200 python3 scripts/probe_ncu_l2_replay.py "$R/probe_l2" ;;
    l2_fixture) step l2_fixture 400 python3 scripts/capture_fixtures.py "$R/l2_fixture" --only-l2 ;;
    regret) step regret 580 python3 scripts/bench_regret.py \
              --spaces examples/seed_gemm.py:space,examples/softmax_triton.py:space --out "$R/bench_regret.json" ;;
    regret_suite) step regret_suite 570 python3 scripts/bench_regret.py --resume --timeout 540 --budget-s 560 \
                    --out benchmarks/results/bench_regret.json
                  cp benchmarks/results/bench_regret.json "$R/"; pack ;;
    flips) F=benchmarks/results/bench_decisions_flips_second_process.json; M=(); [ -f "$F" ] && M=(--merge "$F")
           step flips 570 python3 scripts/bench_decisions.py --runs 10 "${M[@]}" --out "$R/flips.json"
           cp "$R/flips.json" "$F" 2>/dev/null; pack ;;
    dask|dask_two) # Dask is not on the GPU machines: its wheels travel in .whl (carry it; see the device notes)
           python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
             "${WHL:-.whl}"/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
           if [ "$s" = dask ]; then step dask 400 python3 scripts/bench_dask.py --out "$R/bench_dask.json"
           else step dask_two 580 python3 scripts/bench_dask.py --two --out "$R/bench_dask_x2.json"; fi ;;
    aa) step aa 580 python3 scripts/bench_aa.py --runs 4 --out "$R/bench_aa.json" ;;
    gpu_compose) step gpu_compose 590 $PYTEST -m gpu tests/test_gpu_compose.py ;;
    *) echo "unknown step $s" ;;
  esac
done

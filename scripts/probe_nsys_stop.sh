#!/usr/bin/env bash
# Where `nsys stop` spends its ~3 s (a served job pays it once per session), and whether an option of
# launch or start makes it cheaper. On the GPU machine, every step bounded:
#   source .device/setup.sh && bash scripts/probe_nsys_stop.sh OUTDIR
# For each variant: a worker under `nsys launch`, three start / 10-launch batch / stop rounds, each stop
# timed, the processes running 0.5 s into the third stop listed, then shutdown; a table last.
source "$(dirname "$0")/probe_setup.sh" /tmp/nsprof-stop-probe probe_nsys_stop.log "${1:-}"
echo "== nsys: $NSYS"; $NSYS --version
echo "== options"
$NSYS launch --help | grep -i -E -- 'flush|--export|--stats' | head; $NSYS start --help | grep -i -E -- 'flush|--export|--stats' | head
stamp() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }
RESULTS=()
variant() {  # name, extra launch options, extra start options
  local name=$1 lopts=$2 sopts=$3 P=$OUTDIR/$1 times=""
  rm -rf "$P"; mkdir -p "$P"
  echo "== $name: launch [$lopts] start [$sopts]"
  # shellcheck disable=SC2086
  timeout 120 $NSYS launch --session-new="probe$name" --trace=cuda,nvtx --cuda-graph-trace=node $lopts \
    python3 $PROBE worker --dir "$P" > "$P/launch.log" 2>&1 &
  local lpid=$! i
  for i in $(seq 600); do [ -f "$P/ready" ] && break; kill -0 $lpid 2>/dev/null || break; sleep 0.1; done
  [ -f "$P/ready" ] || { echo "never ready"; tail -5 "$P/launch.log"; RESULTS+=("$name | not ready"); return; }
  for b in 1 2 3; do
    # shellcheck disable=SC2086
    timeout 60 $NSYS start --session="probe$name" --sample=none --cpuctxsw=none -o "$P/b$b" --force-overwrite=true $sopts \
      > "$P/start$b.log" 2>&1 || { echo "start rc $?"; cat "$P/start$b.log"; }
    timeout 40 python3 $PROBE send --timeout 30 --dir "$P" batch "b$b" 10
    local spy=""
    if [ $b = 3 ]; then
      ( sleep 0.5; ps -eo pid,etimes,args --sort=start_time | grep -v -E 'ps -eo|grep' | tail -8 > "$P/during_stop.txt" ) &
      spy=$!
    fi
    local a; a=$(stamp)
    timeout 60 $NSYS stop --session="probe$name" > "$P/stop$b.log" 2>&1; local rc=$?
    local t; t=$(python3 -c "print(f'{$(stamp)-$a:.2f}')")
    times="$times $t(rc$rc)"
    [ -n "$spy" ] && wait "$spy"
  done
  echo "processes 0.5 s into the third stop:"; cat "$P/during_stop.txt"
  ls -la "$P" | grep -E 'b[123]\.' | head -12
  timeout 30 $NSYS shutdown --session="probe$name" --kill sigkill > /dev/null 2>&1
  kill -9 $lpid 2>/dev/null; wait $lpid 2>/dev/null
  RESULTS+=("$name | $times")
}
variant base "" ""
variant flush "--cuda-flush-interval=100" ""
variant export "" "--export=sqlite"
variant nobt "--cudabacktrace=none --python-backtrace=none" ""
echo "== nsys stop seconds per round (3 rounds)"
printf '%s\n' "${RESULTS[@]}"

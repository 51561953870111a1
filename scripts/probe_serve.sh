#!/usr/bin/env bash
# The probes of docs/serve.md, runnable in one go on the GPU machine, each step bounded by a timeout
# so that a hung tool cannot eat the call:   source .device/setup.sh && bash scripts/probe_serve.sh OUTDIR
# Everything printed goes to OUTDIR/probe_serve.log; the reports stay in OUTDIR/p<N>/.
source "$(dirname "$0")/probe_setup.sh" /tmp/nsprof-serve-probes probe_serve.log "${1:-}"
NCU=$(command -v ncu)
T=timeout
echo "== versions"; $NSYS --version; $NCU --version
echo "== 0. options"
$NSYS launch --help | grep -E -- '--session-new|--trace|--cuda-graph-trace|--wait|--kill' | head -20
$NSYS start --help | grep -E -- '--session|--output|--capture-range|--capture-range-end|repeat|sync' | head -20
$NSYS stop --help | grep -E -- '--session|--defer-report'; $NSYS --help | grep -E 'finalize|sessions|shutdown'
$NCU --help | grep -E -- '--mode|--hostname|--process-id|--kill|--range-filter|--profile-from-start' | head -20
send() { $T 40 python3 $PROBE send --timeout 30 --dir "$P" "$@"; }
fresh() { P=$OUTDIR/p$1; rm -rf "$P"; mkdir -p "$P"; }
wait_ready() { for i in $(seq ${1:-600}); do [ -f "$P/ready" ] && { echo "ready after ~$((i/10)) s"; return 0; }; [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && { echo "launcher $2 died"; return 1; }; sleep 0.1; done; echo "never ready"; return 1; }
stamp() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }
timed() { local a b; a=$(stamp); "$@"; local rc=$?; b=$(stamp); echo "[$(python3 -c "print(f'{$b-$a:.3f}')") s rc=$rc] $*"; return $rc; }
ranges() { python3 - "$1" <<'PY'
import sqlite3, sys, collections
con = sqlite3.connect(sys.argv[1])
names = {}
try:
    rows = con.execute("SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id WHERE e.eventType = 59").fetchall()
except sqlite3.Error as err:
    print("nvtx:", err); rows = []
c = collections.Counter((r[0] or "").split(".r")[0] for r in rows)
try:
    k = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
except sqlite3.Error as err:
    k = f"no kernel table ({err})"
print(sys.argv[1], "ranges:", dict(c), "kernels:", k)
PY
}
want() { [[ " ${PROBES:-1 2 3 4 5} " == *" $1 "* ]]; }
if want 1; then
echo "== 1. nsys launch + start/stop twice"
fresh 1
$NSYS launch --session-new=nsprofprobe --trace=cuda,nvtx \
  --cuda-graph-trace=node python3 $PROBE worker --dir "$P" > "$P/launch.log" 2>&1 &
LPID=$!
wait_ready 600 $LPID || cat "$P/launch.log"; $T 20 $NSYS sessions list
timed $T 60 $NSYS start --session=nsprofprobe --sample=none --cpuctxsw=none -o "$P/b1" --force-overwrite=true
send batch b1 10
timed $T 60 $NSYS stop --session=nsprofprobe
ls -la "$P"; pgrep -af "probe_serve_modes.py worker" || echo "worker gone after stop"
timed $T 60 $NSYS start --session=nsprofprobe --sample=none --cpuctxsw=none -o "$P/b2" --force-overwrite=true; sleep 0.5
send batch b2 10; timed $T 60 $NSYS stop --session=nsprofprobe
timed $T 60 $NSYS start --session=nsprofprobe --sample=none --cpuctxsw=none -o "$P/b3" --force-overwrite=true
send batch b3 10; timed $T 60 $NSYS stop --session=nsprofprobe
for b in b1 b2 b3; do [ -f "$P/$b.nsys-rep" ] && timed $T 120 $NSYS export --type sqlite -f true -o "$P/$b.sqlite" "$P/$b.nsys-rep" && ranges "$P/$b.sqlite"; done
$T 30 $NSYS start --session=nsprofprobe --trace=cuda -o "$P/b4" > "$P/start_trace.log" 2>&1; echo "start --trace rc: $?"; head -3 "$P/start_trace.log"
$T 30 $NSYS stop --session=nsprofprobe >/dev/null 2>&1
timed $T 30 $NSYS shutdown --session=nsprofprobe --kill sigkill; sleep 2
pgrep -af "probe_serve_modes.py worker" || echo "worker gone after shutdown"; kill -9 $LPID 2>/dev/null; wait $LPID 2>/dev/null
tail -5 "$P/launch.log"

fi
if want 2; then
echo "== 2. nsys capture-range=nvtx repeat sync"
fresh 2
$T 200 $NSYS profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
  --capture-range=nvtx --nvtx-capture='job@nsprof' --capture-range-end=repeat:3:sync \
  -o "$P/rep" -f true python3 $PROBE worker --dir "$P" --outer job > "$P/profile.log" 2>&1 &
PPID2=$!
wait_ready 600 $PPID2 || cat "$P/profile.log"; timed send batch c1 5; ls "$P"; timed send batch c2 5; ls "$P"; send exit; wait $PPID2; echo "profile rc $?"; ls -la "$P"; tail -8 "$P/profile.log"
for f in "$P"/rep*.nsys-rep; do [ -f "$f" ] && $T 120 $NSYS export --type sqlite -f true -o "${f%.nsys-rep}.sqlite" "$f" >/dev/null && ranges "${f%.nsys-rep}.sqlite"; done

fi
if want 3; then
echo "== 3. nsys capture-range=cudaProfilerApi repeat"
fresh 3
$T 200 $NSYS profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \
  --capture-range=cudaProfilerApi --capture-range-end=repeat -o "$P/cp" -f true \
  python3 $PROBE worker --dir "$P" > "$P/profile.log" 2>&1 &
PPID3=$!
wait_ready 600 $PPID3 || cat "$P/profile.log"; send profstart; timed send batch d1 5; send profstop; sleep 1; ls "$P"
send profstart; timed send batch d2 5; send profstop; sleep 1; ls "$P"; send exit; wait $PPID3; echo "profile rc $?"; ls -la "$P"; tail -8 "$P/profile.log"
for f in "$P"/cp*.nsys-rep; do [ -f "$f" ] && $T 120 $NSYS export --type sqlite -f true -o "${f%.nsys-rep}.sqlite" "$f" >/dev/null && ranges "${f%.nsys-rep}.sqlite"; done

fi
if want 4; then
echo "== 4. ncu --mode launch, attach twice"
fresh 4
$T 300 $NCU --mode launch python3 $PROBE worker --dir "$P" > "$P/launch.log" 2>&1 &
NPID=$!
sleep 8; pgrep -af "probe_serve_modes.py worker" | head -3; [ -f "$P/ready" ] && echo "ready before attach" || echo "not ready before attach (suspended)"
A1=$(stamp)
$T 120 $NCU --mode attach --hostname 127.0.0.1 \
  --metrics gpu__time_duration.sum --clock-control base --cache-control all \
  --launch-count 20 -f -o "$P/n1" > "$P/attach1.log" 2>&1 &
AT1=$!
wait_ready 600 $AT1 || cat "$P/attach1.log"; timed send batch n1 10; wait $AT1; echo "attach 1 rc: $? after $(python3 -c "print(f'{$(stamp)-$A1:.2f}')") s"; tail -5 "$P/attach1.log"
pgrep -af "probe_serve_modes.py worker" | head -2 || echo "worker gone after attach 1"
A2=$(stamp)
$T 60 $NCU --mode attach --hostname 127.0.0.1 \
  --metrics gpu__time_duration.sum --clock-control none --cache-control none \
  --launch-count 20 -f -o "$P/n2" > "$P/attach2.log" 2>&1 &
AT2=$!
sleep 5; timed send batch n2 10; wait $AT2; echo "attach 2 rc: $? after $(python3 -c "print(f'{$(stamp)-$A2:.2f}')") s"; tail -5 "$P/attach2.log"
echo "-- 4b. attach ended by SIGINT"
$T 60 $NCU --mode attach --hostname 127.0.0.1 \
  --metrics gpu__time_duration.sum -f -o "$P/n3" > "$P/attach3.log" 2>&1 &
AT3=$!
sleep 5; timed send batch n3 10; kill -INT $AT3; wait $AT3; echo "attach 3 rc: $?"; tail -5 "$P/attach3.log"
for n in n1 n2 n3; do [ -f "$P/$n.ncu-rep" ] && $T 120 python3 -m nsprof analyze "$P/$n.ncu-rep" 2>&1 | head -12; ls -la "$P/$n.ncu-rep" 2>/dev/null; done
send exit; sleep 2; kill $NPID 2>/dev/null; wait $NPID; tail -5 "$P/launch.log"

fi
if want 5; then
echo "== 5. ncu --profile-from-start off, report while running"
fresh 5
$T 200 $NCU --profile-from-start off --nvtx --nvtx-include 'nsprof@nsprof/' --metrics gpu__time_duration.sum \
  -f -o "$P/live" python3 $PROBE worker --dir "$P" > "$P/live.log" 2>&1 &
LV=$!
wait_ready 600 $LV || cat "$P/live.log"; send profstart; timed send batch l1 5; send profstop; sleep 2; ls -la "$P"
[ -f "$P/live.ncu-rep" ] && cp "$P/live.ncu-rep" "$P/copy.ncu-rep" && $T 60 python3 -m nsprof analyze "$P/copy.ncu-rep" 2>&1 | head -12
send exit; wait $LV; echo "live rc $?"; tail -4 "$P/live.log"
fi
echo "== done"

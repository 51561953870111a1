# Sourced by the nsys probes (probe_serve.sh, probe_nsys_stop.sh), on the GPU machine:
#   source scripts/probe_setup.sh DEFAULT_OUTDIR LOG [OUTDIR]
# sets OUTDIR (the third argument, else the default) and creates it, tees everything printed from here to
# OUTDIR/LOG, and sets NSYS (the newest under /opt/nvidia/nsight-compute, else nsys on PATH) and PROBE.
set -u
OUTDIR=${3:-$1}
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/$2") 2>&1
NSYS=$(ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -1)
[ -n "$NSYS" ] || NSYS=$(command -v nsys)
PROBE=scripts/probe_serve_modes.py

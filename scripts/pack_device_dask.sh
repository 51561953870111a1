#!/usr/bin/env bash
# .device-dask/: the device packages (.device, from the device notes' pack-site.sh) without CUPTI's
# Python bindings, which no tune needs, plus Dask's wheels (.whl): .device and .whl together, with the
# checkout, are over the 64 MiB a device call carries. Run from the project root, then:
#   carry [".device-dask"]: source .device-dask/setup.sh && WHL=.device-dask/whl bash scripts/gpu_steps.sh dask
set -eu
[ -d .device ] && [ -d .whl ] || { echo "needs .device and .whl in the project root" >&2; exit 2; }
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
tar -xJf .device/site.tar.xz -C "$site"
rm -rf "$site"/cupti "$site"/cupti_python*
rm -rf .device-dask && mkdir -p .device-dask/whl
cp -r .device/lib .device/nvml .device/setup.sh .device-dask/
XZ_OPT=-9T2 tar -cJf .device-dask/site.tar.xz -C "$site" .
cp .whl/*.whl .device-dask/whl/
grep -qx "/.device-dask/" .git/info/exclude 2>/dev/null || echo "/.device-dask/" >> .git/info/exclude
du -sh .device-dask

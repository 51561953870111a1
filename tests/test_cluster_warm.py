"""A LocalCluster's workers import what a batch needs as soon as they are up, while the client goes on
(loading the target, checking the store): the first batch does not pay for those imports."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("distributed")


def _imported() -> list[str]:
    import sys

    return [name for name in ("nsprof.profile", "nsprof.session.run", "pandas") if name in sys.modules]


def test_a_new_worker_imports_a_batchs_modules_before_any_batch(tmp_path, monkeypatch):
    from nsprof import cluster
    from nsprof.settings import ClusterSettings

    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    client = cluster.connect(ClusterSettings(devices=(0,)))
    try:
        deadline = time.monotonic() + 30
        while True:
            (imported,) = client.run(_imported).values()
            if len(imported) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert imported == ["nsprof.profile", "nsprof.session.run", "pandas"]
    finally:
        cluster.close()

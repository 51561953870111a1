"""Regression, found in review: a cluster run whose batches used only some of the cluster's GPUs relabels its run to
those GPUs, and then ranks only that run's rows: the configs resumed from the store are lost."""

from __future__ import annotations

from test_tune import fixture_rows, gemm_target  # noqa: F401

from nsprof.host.gpu import Gpu
from nsprof.settings import ClusterSettings, TuneSettings


def test_cluster_resume_keeps_the_stored_configs(tmp_path, monkeypatch, gemm_target):  # noqa: F811
    from nsprof import tune as tune_module

    calls = []

    def fake_measure(
        target, n, backend, settings, config_ids, on_progress, on_rows=None, on_device=None, **unused
    ):
        calls.append(list(config_ids))
        if on_device is not None:
            # One batch came back, from one of the two GPUs (fewer configs than workers).
            on_device(
                {"uuid": "GPU-a", "name": "NVIDIA H200"}
                if len(config_ids) < 2
                else {"uuid": "GPU-a,GPU-b", "name": "NVIDIA H200"}
            )
        return fixture_rows(config_ids)

    monkeypatch.setattr("nsprof.tune.measure.measure_rows", fake_measure)
    monkeypatch.setattr(
        "nsprof.cluster.cluster_gpu", lambda settings: Gpu(None, "GPU-a,GPU-b", "NVIDIA H200")
    )
    monkeypatch.setattr("nsprof.host.tools.find_ncu", lambda required=True: type("T", (), {"path": "ncu"})())
    monkeypatch.setattr("nsprof.host.tools.tool_version", lambda path: "Version 2025.3.1.0")
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    store = tmp_path / "results.sqlite"
    cluster = ClusterSettings(devices=(0, 1))
    ids = list(range(8, 20))  # measured configs of the fixture
    tune_module.tune(
        gemm_target,
        TuneSettings(backend="ncu", mode="graph", store=store, budget_s=0, cluster=cluster),
        config_ids=ids[:-1],
    )
    resumed = tune_module.tune(
        gemm_target,
        TuneSettings(backend="ncu", mode="graph", store=store, budget_s=0, resume=True, cluster=cluster),
        config_ids=ids,
    )
    assert calls[1] == [19]  # only the config the store lacked went to the cluster
    # ... but the ranking must still hold all 12 configs, 11 of them from the store
    assert sorted(resumed.ranking.table["config_id"]) == ids, resumed.ranking.notes

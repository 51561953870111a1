"""TileLang's feed-back (integrations.tilelang.feed_back) against the stand-in of TileLang's AutoTuner
(tests/standin_tilelang.py): here it benchmarks the configs in an order other than their own, keeps
the first of equal latencies (a strict `<`), and writes its winner to a disk cache entry. The real
TileLang runs in tests/test_gpu_integrations.py and tests/test_gpu_serve.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standin_tilelang import tilelang as standin  # noqa: F401

from nsprof.integrations import tilelang as tl_hook

CONFIGS = [{"block_M": 32}, {"block_M": 64}, {"block_M": 128}]


@pytest.fixture
def tilelang(standin):  # noqa: F811
    standin.ORDER = "reversed"  # the workers' completion order
    return standin


def test_a_config_tied_with_nsprofs_best_does_not_take_its_place_in_tilelangs_cache(tilelang):
    # configs 1 and 2 measured the same (nsys's whole-nanosecond medians tie often); nsprof's best is
    # the lower id, and TileLang, which meets config 2 first, must still keep config 1
    latencies = {0: 0.0071, 1: 0.0068, 2: 0.0068}
    written = tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), latencies)

    assert written == CONFIGS[1]
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    assert json.loads((entry / "best_config.json").read_text()) == CONFIGS[1]
    assert json.loads((entry / "latency.json").read_text()) == 0.0068  # its own latency, as measured


def test_the_best_alone_is_fed_back_as_measured_when_nothing_ties(tilelang):
    written = tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), {0: 0.3, 1: 0.2, 2: 0.1})
    assert written == CONFIGS[2]


def test_every_tuner_is_handed_nsprofs_best_strictly_lowest_and_the_rest_as_measured():
    from nsprof.tuner import best_strictly_first

    best, fed = best_strictly_first({4: 0.5, 2: 0.25, 7: 0.25, 1: 0.25, 3: 0.75})
    assert best == 1  # the lowest config id among equal latencies, as nsprof ranks them
    assert fed[1] == 0.25 and fed[4] == 0.5 and fed[3] == 0.75
    assert all(0.25 < fed[i] < 0.2500001 for i in (2, 7))  # just above the best, nothing more


def test_a_config_that_compiles_to_the_bests_very_kernel_may_stand_in_the_cache_for_it(tilelang):
    configs = [{"block_M": 32}, {"block_M": 64, "note": "a"}, {"block_M": 64, "note": "b"}]
    written = tl_hook.feed_back(tilelang.Autotuned(configs), (1024,), {0: 0.0071, 1: 0.0068, 2: 0.0069})
    assert written == configs[2]  # TileLang met it first: one kernel, so nsprof's best is what it loads
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    assert json.loads((entry / "latency.json").read_text()) == 0.0068


def _users_entry(tilelang) -> tuple[Path, dict]:
    """The user's own tuned entry (TileLang's own benchmark), before nsprof feeds anything back."""
    tilelang.LATENCY.update({32: 0.3, 64: 0.2, 128: 0.1})
    tilelang.Autotuned(CONFIGS).compile(1024)
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    return entry, json.loads((entry / "best_config.json").read_text())


def _failing_save(self, key, result):
    raise OSError(28, "No space left on device")


def test_a_save_that_fails_keeps_the_entry_that_was_there_and_says_so(tilelang, monkeypatch):
    entry, before = _users_entry(tilelang)
    monkeypatch.setattr(tilelang.AutoTuner, "_save_result_to_disk", _failing_save)
    with pytest.raises(OSError, match="No space left on device") as raised:
        tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), {0: 0.1, 1: 0.2, 2: 0.3})
    assert json.loads((entry / "best_config.json").read_text()) == before
    assert sorted(p.name for p in Path(tilelang.CACHE_DIR).iterdir()) == [entry.name]
    assert "No space left on device" in str(raised.value)


def test_an_entry_left_aside_by_a_killed_feed_back_is_put_back(tilelang, monkeypatch):
    import subprocess
    import sys

    entry, before = _users_entry(tilelang)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    aside = entry.with_name(f"{entry.name}.nsprof-replaced-{int(gone.stdout)}")
    entry.rename(aside)  # a feed-back killed at its timeout between its move and TileLang's save
    monkeypatch.setattr(tilelang.AutoTuner, "_save_result_to_disk", _failing_save)
    with pytest.raises(OSError):
        tl_hook.feed_back(tilelang.Autotuned(CONFIGS), (1024,), {0: 0.1, 1: 0.2, 2: 0.3})
    assert json.loads((entry / "best_config.json").read_text()) == before
    assert sorted(p.name for p in Path(tilelang.CACHE_DIR).iterdir()) == [entry.name]


def test_a_config_with_a_tuple_is_the_one_read_back_from_tilelangs_json(tilelang):
    configs = [{"block_M": 32, "warp": (2, 2)}, {"block_M": 64, "warp": (2, 2)}]
    written = tl_hook.feed_back(tilelang.Autotuned(configs), (1024,), {0: 0.2, 1: 0.1})
    assert written == {"block_M": 64, "warp": [2, 2]}  # as TileLang's own JSON holds it

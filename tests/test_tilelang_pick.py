"""TileLang's own pick (TileLangHook.pick, pick_shapes) against the stand-in of TileLang 0.1.15's
AutoTuner (tests/standin_tilelang.py: a class-wide in-memory cache, a disk cache read before tuning
and written after, a per-call cache on the autotuned kernel, the best by its own benchmark). The
real TileLang runs in tests/test_gpu_integrations.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from standin_tilelang import tilelang as standin  # noqa: F401

from nsprof.integrations import tilelang as tl_hook


@pytest.fixture
def tilelang(standin):  # noqa: F811
    return standin  # benchmarking the configs in their own order


CONFIGS = [{"block_M": 32, "stages": 2}, {"block_M": 64, "stages": 2}, {"block_M": 128, "stages": 3}]


def test_the_pick_is_tilelangs_own_benchmark_of_now_and_leaves_nothing_behind(tilelang):
    tilelang.LATENCY.update({32: 0.5, 64: 0.2, 128: 0.3})
    autotuned = tilelang.Autotuned(CONFIGS)
    # an earlier winner in every cache: the pick must measure again, not read it back
    earlier = tilelang.AutotuneResult(0.1, CONFIGS[0])
    tilelang.AutoTuner(autotuned, (1024,))._save_result_to_disk(repr((1024,)), earlier)
    tilelang.AutoTuner._memory_cache[repr((1024,))] = earlier
    autotuned._tuner_cache[repr((1024,))] = ("old kernel", CONFIGS[0])
    hook = tl_hook.TileLangHook(autotuned, (1024,))
    assert hook.can_pick and hook.can_pick_shapes

    pick = hook.pick()

    assert pick == {
        "tuner": "TileLang's autotuner",
        "timer": "TileLang's own benchmark",
        "config_id": 1,
        "config": CONFIGS[1],
        "timings_ms": {"1": 0.2},
    }
    assert tilelang.BENCHMARKED == CONFIGS  # every config measured by TileLang itself
    # the caches hold what they held: the pick is not a winner anyone loads later
    (entry,) = Path(tilelang.CACHE_DIR).iterdir()
    assert json.loads((entry / "best_config.json").read_text()) == CONFIGS[0]
    assert tilelang.AutoTuner._memory_cache[repr((1024,))].config == CONFIGS[0]
    assert autotuned._tuner_cache == {repr((1024,)): ("old kernel", CONFIGS[0])}
    assert tilelang.AutoTuner._save_result_to_disk.__name__ == "_save_result_to_disk"


def test_each_shape_is_picked_on_its_own_call(tilelang):
    autotuned = tilelang.Autotuned(CONFIGS)
    hook = tl_hook.TileLangHook(autotuned, (1,), shapes=[(256,), (4096,)])
    tilelang.LATENCY.update({32: 0.1, 64: 0.2, 128: 0.3})
    first = hook.pick_shapes([0])
    tilelang.LATENCY.update({32: 0.9, 64: 0.8, 128: 0.3})
    second = hook.pick_shapes([1])
    assert first[0]["config_id"] == 0 and second[1]["config_id"] == 2
    assert not Path(tilelang.CACHE_DIR).exists() and not autotuned._tuner_cache


def test_a_pick_of_a_space_without_shapes_at_a_shape_is_one_clear_error(tilelang):
    from nsprof.errors import NsprofError

    hook = tl_hook.TileLangHook(tilelang.Autotuned(CONFIGS), (1,))
    with pytest.raises(NsprofError, match="no shapes"):
        hook.pick_shapes([0])


def test_the_pick_names_the_config_tilelang_chose_not_one_whose_keys_it_holds(tilelang):
    configs = [{"block_M": 64}, {"block_M": 64, "note": "threads 256"}]
    tilelang.LATENCY.update({64: 0.1})
    tilelang.ORDER = "reversed"  # equal latencies: TileLang keeps the first it meets, config 1
    pick = tl_hook.tilelang_pick(tilelang.Autotuned(configs), (1024,))
    assert pick["config"] == configs[1] and pick["config_id"] == 1

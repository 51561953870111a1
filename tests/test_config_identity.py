"""A config's identity (its canonical JSON: the results store's key, and what a worker checks it loaded)
is the same in every process: a set's items in one order whatever the hash seed, an object's default
text without the memory address it holds in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import run_nsprof

# Run in children with different hash seeds: str hashes (and so a set's iteration order) differ.
IDENTITIES = textwrap.dedent("""
    import json
    from nsprof.store import config_json
    from nsprof.space import shape_json

    class Tile:
        def __init__(self, n):
            self.n = n

    words = frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})
    print(json.dumps([config_json({"opts": words, "more": set(words)}), config_json({"tile": Tile(1)}),
                      shape_json({"dims": words})]))
""")


def _identities(seed: int) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run(
        [sys.executable, "-c", IDENTITIES], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)


def test_a_config_is_the_same_json_in_every_process():
    first, *others = [_identities(seed) for seed in (0, 1, 2, 3)]
    assert all(other == first for other in others), [first, *others]
    sets, tile, shape = first
    assert json.loads(sets)["opts"] == sorted(json.loads(sets)["opts"])
    assert "0x" in tile and "at 0x7" not in tile and "at 0x5" not in tile, tile
    assert json.loads(shape)["dims"] == json.loads(sets)["opts"]


TARGET = textwrap.dedent("""
    from nsprof.space import Space

    class Tile:
        def __init__(self, n):
            self.n = n

    WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    CONFIGS = [{"ns": 3000, "opts": frozenset(WORDS), "tile": Tile(1)},
               {"ns": 2000, "opts": frozenset(WORDS[:5]), "tile": Tile(2)}]
    space = Space(name="sets", configs=CONFIGS, build=lambda c: (lambda: None), device="cpu")
""")


def test_a_config_holding_a_set_and_an_object_is_tuned_and_resumed(tmp_path):
    (tmp_path / "t.py").write_text(TARGET)
    command = "tune t.py:space --backend ncu --mode direct --store r.sqlite --no-tuner-pick --resume".split()
    env = {"NSPROF_SERVE": "0", "PYTHONHASHSEED": None}  # each process its own hash seed
    first = run_nsprof(*command, cwd=tmp_path, env=env, standins=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "best: config 1" in first.stdout, first.stdout
    again = run_nsprof(*command, cwd=tmp_path, env=env, standins=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed: 2 of 2 configs came from the results store" in again.stdout, again.stdout

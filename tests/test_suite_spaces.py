"""The example kernel spaces written for the timers' regret suite (examples/rmsnorm_triton.py and
the others below), read on a machine without torch or Triton: each loads as nsprof loads a
target, lists 3 shapes and distinct JSON-able configs of one set of keys, passes its own static
check at every (shape, config), and imports neither torch nor Triton until a config is built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "rmsnorm_triton",
    "layernorm_triton",
    "add_triton",
    "reduce_triton",
    "attention_triton",
    "swiglu_triton",
    "softmax_shapes_triton",
]

# Run in a fresh process: a torch or Triton that another test (or module) imported would hide an
# example's own import of it. The configs go back as JSON text, so that one that is not JSON-able
# fails there.
READ = r"""
import json, sys
from nsprof.space import load_target
space = load_target(sys.argv[1] + ":space")
module = sys.modules[next(n for n in sys.modules if n.startswith("nsprof_target_"))]
print(json.dumps({
    "name": space.name,
    "device": space.device,
    "shapes": space.shapes,
    "configs": space.configs,
    "doc": module.__doc__ or "",
    "refused": [
        [i, j, str(exc)]
        for i, shape in enumerate(space.shapes)
        for j, config in enumerate(space.configs)
        for exc in _refusal(module.check_config, config, shape)
    ],
    "imported": sorted(m for m in ("torch", "triton") if m in sys.modules),
}))
"""

REFUSAL = r"""
def _refusal(check, config, shape):
    try:
        check(config, shape)
    except ValueError as exc:
        return [exc]
    return []
"""


def _read(module: str) -> dict:
    path = ROOT / "examples" / f"{module}.py"
    done = subprocess.run(
        [sys.executable, "-c", REFUSAL + READ, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def read() -> dict[str, dict]:
    return {module: _read(module) for module in MODULES}


@pytest.mark.parametrize("module", MODULES)
def test_space_lists_three_shapes_and_distinct_configs_of_one_set_of_keys(read, module):
    space = read[module]
    assert space["device"] == "cuda"
    assert len(space["shapes"]) == 3
    configs = space["configs"]
    assert isinstance(configs, list) and 8 <= len(configs) <= 24
    assert all(isinstance(config, dict) for config in configs)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    assert len({tuple(sorted(c)) for c in configs}) == 1
    assert "num_warps" in configs[0]


@pytest.mark.parametrize("module", MODULES)
def test_every_config_passes_its_check_at_every_shape(read, module):
    assert read[module]["refused"] == []


@pytest.mark.parametrize("module", MODULES)
def test_import_leaves_torch_and_triton_unimported(read, module):
    assert read[module]["imported"] == []


@pytest.mark.parametrize("module", MODULES)
def test_docstring_says_how_to_tune_it(read, module):
    assert f"nsprof tune examples/{module}.py:space --backend nsys --mode graph" in read[module]["doc"]


def test_space_names_are_distinct(read):
    names = [read[module]["name"] for module in MODULES]
    assert len(set(names)) == len(names)


def test_check_config_refuses_a_block_that_is_not_a_power_of_2():
    """The static check is live: it refuses what tl.arange would refuse at compile time."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import attention_triton
        import rmsnorm_triton
    finally:
        sys.path.remove(str(ROOT / "examples"))
    with pytest.raises(ValueError, match="power of 2"):
        rmsnorm_triton.check_config({"BLOCK": 3000}, rmsnorm_triton.SHAPES[0])
    with pytest.raises(ValueError, match="does not divide"):
        attention_triton.check_config({"BLOCK_M": 64, "BLOCK_N": 64}, {"seq_k": 1000, "head_dim": 128})

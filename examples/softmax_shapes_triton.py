"""The Triton softmax of examples/softmax_triton.py at three shapes, as an nsprof config space.

Rows of fp16 softmax, one row block per program (ROWS_PER_PROGRAM rows, each BLOCK = the row
length wide, a power of 2): a vocabulary-like wide row, a hidden-size row and a short
attention-score row.

Shapes: 1024 x 8192, 8192 x 2048 and 32768 x 512 (rows x columns; 8 M, 16 M and 16 M elements).
Config axes: ROWS_PER_PROGRAM 1/2/4/8 x num_warps 4/8/16 x num_stages 1/2 (24 configs); each is
valid at every shape (a program's last rows are masked when they run past the end).

    nsprof tune examples/softmax_shapes_triton.py:space --backend nsys --mode graph
"""

from __future__ import annotations

import itertools

from softmax_triton import make_launch
from suite_checks import checked, powers_of_two

from nsprof.space import Space

SHAPES = [{"rows": 1024, "cols": 8192}, {"rows": 8192, "cols": 2048}, {"rows": 32768, "cols": 512}]


def check_config(config: dict, shape: dict) -> None:
    """Raise ValueError for a config that cannot run at this shape (a row is one tl.arange block)."""
    powers_of_two(shape, "cols")
    powers_of_two(config, "rows_per_program")


def build(config: dict, shape: dict):
    import torch

    check_config(config, shape)
    torch.manual_seed(0)
    launch, x, y = make_launch(config, shape["rows"], shape["cols"])
    return checked(launch, y, torch.softmax(x.float(), dim=1), 1e-2)


CONFIGS = [
    {"rows_per_program": r, "num_warps": w, "num_stages": s}
    for r, w, s in itertools.product((1, 2, 4, 8), (4, 8, 16), (1, 2))
]

space = Space(name="softmax_shapes_triton", configs=CONFIGS, build=build, shapes=SHAPES)

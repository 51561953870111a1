"""A Triton space's compile step (nsprof.integrations.triton.autotune_space; Space.compile_in_worker):
Warmup, JITFunction.warmup of one config on stand-ins of the shape's inputs (_stand_in), run by the
measuring worker in a pool of threads before its first window (nsprof.worker.windows._CompileAhead).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from nsprof.errors import NsprofError


class Warmup:
    """A Triton Space's compile step (Space.compile_in_worker): warmup(config[, shape]) compiles the
    config into Triton's caches and launches nothing. The shape's first point, alone and before any
    window (nsprof.worker.windows._CompileAhead), makes its inputs and keeps stand-ins of them
    (_stand_in), on which the others compile in the pool's threads: no thread touches the GPU. Left
    to their first launch, as without this step: the configs `skip` names, and a shape's configs
    where its stand-ins do not serve the kernel (a heuristic or hook that reads a tensor's device or
    data), or where its first point's compile has not ended (a hang)."""

    PENDING = "pending"

    def __init__(self, autotuned, make_inputs, grid, skip: Callable[[dict], bool]) -> None:
        self.autotuned, self.make_inputs, self.grid, self.skip = autotuned, make_inputs, grid, skip
        # per shape: [stand-ins, whether a compile on them is known to be the real one's]; None: none
        # that serve; a text: why the inputs could not be made (or PENDING: being made)
        self.inputs: dict[str, Any] = {}

    def __call__(self, config: dict, *shape) -> None:
        key = json.dumps(shape, sort_keys=True, default=str)
        if key not in self.inputs:
            return self._first(key, config, shape)
        made = self.inputs[key]
        if isinstance(made, str) and made != self.PENDING:
            raise NsprofError(f"the inputs at this shape could not be made: {made}")
        if not isinstance(made, list) or self.skip(config):
            return
        if made[1]:
            self._warm(made[0], config)
        elif self._serves(made[0], config):  # stand-ins no config compiled on yet: one that fails
            made[1] = True  # is left to its first launch, where the real inputs tell why

    def _first(self, key: str, config: dict, shape: tuple) -> None:
        self.inputs[key] = self.PENDING  # a call at this shape meanwhile (this one hung) makes none
        try:
            inputs = tuple(self.make_inputs(*shape))
        except Exception as exc:
            self.inputs[key] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            raise
        # A tensor torch cannot describe on "meta" leaves this shape's configs to their first launch.
        try:
            made = [_stand_in(inputs), False]
        except Exception:
            made = None
        if self.skip(config):
            self.inputs[key] = made
            return
        if made is not None and self._serves(made[0], config):
            self.inputs[key] = [made[0], True]
            return
        try:  # the real inputs decide: the config's own error, or stand-ins that do not serve
            self._warm(inputs, config)
        except Exception:
            self.inputs[key] = made  # the config's own error: the stand-ins may serve the others
            raise
        self.inputs[key] = None

    def _serves(self, stand_ins: tuple, config: dict) -> bool:
        """Whether `config` compiles on the stand-ins (where not, the real inputs tell why)."""
        try:
            self._warm(stand_ins, config)
        except Exception:
            return False
        return True

    def _warm(self, inputs: tuple, config: dict) -> None:
        args, kwargs = inputs
        self.autotuned.fn.warmup(*args, grid=self.grid, **kwargs, **config)


def _stand_in(value):
    """A torch tensor as a tensor of its dtype, shape, strides and storage offset on torch's "meta"
    device: what Triton specializes a kernel on (the dtype; the address's alignment, which the offset
    sets, the allocation being aligned), holding no memory. Tuples, lists and dicts of them likewise;
    anything else as it is."""
    torch = sys.modules.get("torch")  # no tensor without it
    if torch is not None and isinstance(value, torch.Tensor):
        reach = sum((n - 1) * step for n, step in zip(value.shape, value.stride()))
        base = torch.empty(
            value.storage_offset() + (reach + 1 if value.numel() else 0), dtype=value.dtype, device="meta"
        )
        return base.as_strided(value.shape, value.stride(), value.storage_offset())
    if type(value) in (tuple, list):
        return type(value)(_stand_in(item) for item in value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_stand_in(item) for item in value))
    if isinstance(value, Mapping):
        return {key: _stand_in(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # Triton's TensorDescriptor
        fields = {f.name: _stand_in(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value

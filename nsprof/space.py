"""Config spaces and targets: what nsprof measures.

A target is named `path/to/file.py:attr` (or `package.module:attr`). The attribute is a
`Space`, or a function with no arguments returning one. A Space lists candidate configs
and knows how to turn one config into a zero-argument launch callable; the callable makes
no allocations of its own (inputs are made in `build`, with random data, never zeros).

    from nsprof.space import Space

    space = Space(
        name="seed_gemm",
        configs=[{"block_N": 32, "block_K": 128}, ...],
        build=lambda cfg: make_launch(cfg),       # -> callable launching the kernel(s)
        compile=lambda cfg: compile_kernel(cfg),  # optional; run in parallel before measuring
    )

A Space can list the problem shapes its kernel serves (an LLM server's M = 1, 16, 128, ...):
`shapes=[...]` (any JSON-able values), and then `build` and `compile` take the shape too,
`build(cfg, shape)`; a Space without shapes calls them with the config alone, as always.
`nsprof tune` measures every (shape, config) in one session and ranks each shape on its own.

    space = Space(configs=[...], shapes=[{"M": 1}, {"M": 16}],
                  build=lambda cfg, shape: make_launch(cfg, **shape))

A Space over an autotuner's configs also carries that tuner's hook (`tuner`, an
nsprof.tuner.TunerHook; nsprof.integrations makes them), through which `nsprof tune` asks the
tuner's own pick and feeds its ranking back.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsprof.errors import TargetError, printable
from nsprof.space_source import split_target, target_fingerprint
from nsprof.tuner import TunerHook


class Listing:
    """What a Space and nsprof's view of one (nsprof.space_view.SpaceView) read the same way from their
    `configs` and `shapes`: labels, the number of shapes, the points a session numbers."""

    configs: list
    shapes: list | None

    def label(self, config_id: int) -> str:
        """A short readable name for one config: k=v pairs."""
        return config_label(self.configs[config_id])

    @property
    def n_shapes(self) -> int:
        """How many shapes the space lists (0: it has none)."""
        return 0 if self.shapes is None else len(self.shapes)

    @property
    def points(self):
        """How a session numbers this space's (shape, config) pairs (nsprof.schema.Points)."""
        from nsprof.schema import Points

        return Points(len(self.configs), self.n_shapes)

    def shape_label(self, shape: int | None) -> str:
        """A short readable name for one shape (k=v pairs for a dict, else its text)."""
        return "" if shape is None else config_label(self.shapes[shape])

    def confirm(self) -> None:
        """Nothing: a loaded Space is the target (nsprof.space_view.SpaceView's asks a child)."""


@dataclass
class Space(Listing):
    configs: list[dict[str, Any]]
    build: Callable[..., Callable[[], Any]]  # build(config), or build(config, shape) with shapes
    name: str = "space"
    compile: Callable[..., Any] | None = None
    # "cuda": launches are asynchronous on the current CUDA stream (torch); "cpu": plain
    # Python calls, with no NVTX ranges (used by nsprof's own tests of the worker's fault handling).
    device: str = "cuda"
    # The autotuner behind these configs: its own pick, and the feed-back of nsprof's ranking.
    tuner: TunerHook | None = None
    # The problem shapes the configs are tuned for (None: one problem, built into `build`). With
    # shapes, build(config, shape) and compile(config, shape).
    shapes: list[Any] | None = None
    # target_fingerprint of the source load_target read this Space from ("": not loaded by load_target)
    fingerprint: str = field(default="", compare=False, repr=False)
    # Where `compile` runs. False: in a process of its own, started beside the session. True: in the
    # measuring worker, for a compile that needs what only the worker has (a Triton kernel is
    # specialized on its GPU inputs), all of it before the first window: the first call at each shape
    # alone, the others in a pool of threads, so those must not use the GPU.
    compile_in_worker: bool = False

    def __post_init__(self) -> None:
        self.configs = self._listed("configs", self.configs)
        if not self.configs:
            raise TargetError(f"space {self.name!r} has no configs")
        for index, config in enumerate(self.configs):  # stored and matched by its canonical JSON
            self._json("config", index, config)
        if self.shapes is not None:
            self.shapes = self._listed("shapes", self.shapes)
            if not self.shapes:
                raise TargetError(
                    f"space {self.name!r}: shapes is an empty list (leave it out for no shapes)"
                )
            seen: dict[str, int] = {}
            for index, shape in enumerate(self.shapes):  # the store keys a shape by its JSON
                text = self._json("shape", index, shape)
                first = seen.setdefault(text, index)
                if first != index:
                    raise TargetError(
                        f"space {self.name!r}: shapes {first} and {index} are the same shape ({text}); list each once"
                    )
        if self.device not in ("cuda", "cpu"):
            raise TargetError(f"space {self.name!r}: device must be 'cuda' or 'cpu'")

    def _json(self, what: str, index: int, value) -> str:
        """The canonical JSON of config or shape `index` (store_rows.config_json), or one line saying it has
        none."""
        from nsprof.store_rows import config_json

        try:
            return config_json(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TargetError(
                f"space {self.name!r}: {what} {index} has no JSON form ({exc}): its keys must be strings, "
                "or numbers of one kind, at every level"
            ) from None

    def _listed(self, what: str, values) -> list:
        """`values` as a list: a sequence (a list, a tuple, an array), not a generator, a set, a dict or a
        string."""
        from collections.abc import Mapping

        # a set's order is its hashes', another in the worker; a mapping, a string: one key or letter a config
        if isinstance(values, (str, bytes, bytearray, Mapping, set, frozenset)) or not hasattr(
            values, "__len__"
        ):
            raise TargetError(f"space {self.name!r}: {what} must be a list, not {type(values).__name__}")
        return list(values)

    @property
    def compiles(self) -> str:
        """Where the space's compile step runs: "beside" the session, in the "worker", or "" (none)."""
        if self.compile is None:
            return ""
        return "worker" if self.compile_in_worker else "beside"

    def build_at(self, config_id: int, shape: int | None = None):
        """The zero-argument launch of one config (at shape index `shape`, for a space with shapes)."""
        if self.shapes is None:
            return self.build(self.configs[config_id])
        return self.build(self.configs[config_id], self.shapes[shape])

    def as_read(self) -> dict:
        """What nsprof read of this space, for a worker to check that it loads the same
        (nsprof.worker.protocol.Job.expect): {"configs": [each config's canonical JSON, by id],
        "shapes": [each shape's] or None, "fingerprint": its source's, "" if unknown, "compiles":
        where its compile step runs (Space.compiles), "tuner": its tuner's name and abilities, or None}."""
        from nsprof.store import config_json

        tuner = self.tuner
        return {
            "configs": [config_json(c) for c in self.configs],
            "shapes": None if self.shapes is None else [shape_json(s) for s in self.shapes],
            "fingerprint": self.fingerprint,
            "compiles": self.compiles,
            "tuner": None
            if tuner is None
            else {"name": tuner.name, **{a: bool(getattr(tuner, a)) for a in TUNER_ABILITIES}},
        }

    def changes_since(self, read: dict) -> str | None:
        """How this space differs from what nsprof read of it (`read`: as_read()), in one line; None
        when it does not (read_changes)."""
        return read_changes(self.as_read(), read)

    def compile_at(self, config_id: int, shape: int | None = None):
        if self.compile is None:
            return None
        if self.shapes is None:
            return self.compile(self.configs[config_id])
        return self.compile(self.configs[config_id], self.shapes[shape])


# What as_read says of a tuner hook (nsprof.tuner.TunerHook): the calls tune decides to make by them.
TUNER_ABILITIES = (
    "can_pick",
    "can_pick_shapes",
    "can_feed_back",
    "can_feed_back_shapes",
    "feed_back_shapes_apart",
)


def read_changes(now: dict, read: dict) -> str | None:
    """How a space as it is `now` differs from what nsprof `read` of it (each Space.as_read()), in one
    line; None when it does not (configs and shapes as their canonical JSON, the same in every process:
    nsprof.store_rows.config_json). `read` may leave out "compiles" and "tuner": what is left out is
    not compared."""
    for what, word in (("configs", "config"), ("shapes", "shape")):
        was, is_now = read.get(what), now[what]
        if was is None and is_now is None:
            continue
        if was is None or is_now is None or len(was) != len(is_now):
            count = "no" if is_now is None else len(is_now)
            return f"it lists {count} {word}s now, not {'none' if was is None else len(was)}"
        for index, (old, new) in enumerate(zip(was, is_now)):
            if old != new:
                return f"{word} {index} is {_cut(new)} now, not {_cut(old)}"
    if read.get("fingerprint") and now["fingerprint"] != read["fingerprint"]:
        return "its source is not the one nsprof read (the target's file, or a module it imports, was edited)"
    if "compiles" in read and bool(now["compiles"]) != bool(read["compiles"]):
        return f"it has {'a' if now['compiles'] else 'no'} compile step now"
    if "tuner" in read and now["tuner"] != read["tuner"]:
        name = "no tuner" if now["tuner"] is None else f"the tuner {now['tuner']['name']}"
        return f"it has {name} now, or one of other abilities"
    return None


def _cut(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def config_label(config: Any) -> str:
    """`k=v,k=v` for a dict config (the form every nsprof table shows), str() otherwise. Values are
    shown as a saved run's JSON holds them (a tuple as a list), so that a run read back labels its
    configs as the live run did."""
    if isinstance(config, dict):
        from nsprof.store_rows import plain

        as_json = json.loads(json.dumps(config, default=plain))
        return printable(",".join(f"{k}={v}" for k, v in as_json.items()))
    return printable(config)


# What the targets' imports in this process did to os.environ (load_target): {name: (its value before the
# first of them that set it, the value the last one gave it)}, None for a variable that was not there.
_SET_BY_TARGETS: dict[str, tuple[str | None, str | None]] = {}


def _note_environ_set(before: dict[str, str]) -> None:
    """Record the variables a target's import changed, from os.environ as it was `before` that import."""
    for name in set(before) | set(os.environ):
        old, new = before.get(name), os.environ.get(name)
        if old != new:
            first = _SET_BY_TARGETS.get(name)
            _SET_BY_TARGETS[name] = (first[0] if first is not None and first[1] == old else old, new)


def environ_before_targets() -> dict[str, str]:
    """os.environ as it would be had this process imported no target: a variable a target's import set
    (TileLang prepends to PYTHONPATH) as it was before, while it still holds what that import gave it, since
    a worker's own import of the target sets it again; every other variable as it is now (what the program
    set itself)."""
    environ = dict(os.environ)
    for name, (old, new) in _SET_BY_TARGETS.items():
        if environ.get(name) == new:
            if old is None:
                environ.pop(name, None)
            else:
                environ[name] = old
    return environ


def load_target(spec: str) -> Space:
    """Import the target's module and return its Space (what its import sets in os.environ is recorded:
    environ_before_targets)."""
    where, attr = split_target(spec)
    before = dict(os.environ)
    try:
        return _load_target(spec, where, attr)
    finally:
        _note_environ_set(before)


def raised(exc: BaseException) -> str:
    """What the target's code raised, in words: `ImportError: no module named x`, `SystemExit: 3`,
    `KeyboardInterrupt` (a message only where it has one)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def target_file(where: str) -> Path | None:
    """The file of a target's `where` (split_target) that names one (not a module): else TargetError."""
    if not (where.endswith(".py") or "/" in where or "\\" in where):
        return None
    path = Path(where)
    if path.is_dir():
        raise TargetError(f"target file {where} is a folder: name a Python file in it (file.py:space)")
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"  # a device, a pipe: no source
        raise TargetError(f"target file {where} {what}")
    return path


def _not_from_here(exc: Exception) -> str:
    """What to do where a file target failed to import a module that lies in the current folder."""
    top = (getattr(exc, "name", None) or "").partition(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    if not top or not (Path(top).is_dir() or Path(f"{top}.py").is_file()):
        return ""
    return (
        f" ({top} is in the current folder, which python does not import from for a target file: "
        "PYTHONPATH=. if that folder is yours, or name the target as a module)"
    )


def _load_target(spec: str, where: str, attr: str) -> Space:
    path = target_file(where)
    if path is None and os.getcwd() not in sys.path and not getattr(sys.flags, "safe_path", False):
        # a module target is found from the current folder, as `python -m` finds it; a file target imports as
        # `python file.py` does, from its own folder: the current one may be another user's to write (/tmp)
        sys.path.insert(0, os.getcwd())
    if path is not None:
        module_name = "nsprof_target_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        spec_obj = importlib.util.spec_from_file_location(module_name, path)
        if spec_obj is None or spec_obj.loader is None:
            raise TargetError(f"cannot import {where}")
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec_obj.loader.exec_module(module)
        except Exception as exc:  # a BaseException stays one (a Ctrl-C, sys.exit(), a worker's stop):
            # the describing child names them in one line (space_view.main)
            raise TargetError(f"importing {where} failed: {raised(exc)}{_not_from_here(exc)}") from exc
    else:
        try:
            module = importlib.import_module(where)
        except Exception as exc:
            raise TargetError(f"importing {where} failed: {raised(exc)}") from exc
    if not hasattr(module, attr):
        raise TargetError(f"{where} has no attribute {attr!r}")
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Space):
        obj = obj()
    if not isinstance(obj, Space):
        raise TargetError(f"{spec} is a {type(obj).__name__}, not an nsprof.Space")
    # After the import, never before: an edit between the two then gives the new source's fingerprint
    # to the old code (a worker's check refuses it), never the old fingerprint to the new code.
    try:
        obj.fingerprint = target_fingerprint(spec)
    except OSError as exc:
        raise TargetError(f"reading the source of {where} failed: {exc}") from exc
    return obj


def shape_json(shape: Any) -> str:
    """The canonical JSON text of one shape, as the results store keys it (nsprof.store_rows.config_json)."""
    from nsprof.store_rows import config_json

    return config_json(shape)

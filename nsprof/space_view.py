"""The target as nsprof's own process sees it, without importing it (no torch, no TileLang, no
Triton in nsprof's process): what a child process that imported it described, saved for this user
so that the next run over the same source reads it without a child.

- SpaceView: a Space's read-only face (configs, shapes, points, labels, as_read, the tuner's
  abilities), all that nsprof's process asks of a target; the worker, the compile step and the
  tuner's child import the target themselves and check it against `as_read()`;
- describe: what the child sends of the Space it loaded;
- read_target: the SpaceView of a target: the one saved under its source's fingerprint, else one
  described by a child (`python -m nsprof.space_view TARGET`: `main`) and saved.

A saved view is keyed by the target's static fingerprint (nsprof.space.target_fingerprint), its
place, the Python and PYTHONPATH. What the fingerprint cannot see (configs read from a data file,
an environment variable) can leave a saved view behind the target: the worker then refuses the
run before it measures anything (nsprof.errors.TargetChanged), and the command reads the target
afresh and runs once more (nsprof.commands.common.on_target).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsprof.errors import TargetError
from nsprof.space import Listing, split_target, target_fingerprint

FORMAT = 1  # of a description: a saved one of another format is read afresh
TUNER_ABILITIES = (
    "can_pick",
    "can_pick_shapes",
    "can_feed_back",
    "can_feed_back_shapes",
    "feed_back_shapes_apart",
)


@dataclass(frozen=True)
class TunerView:
    """A tuner hook's name and abilities (nsprof.tuner.TunerHook): what tune decides its calls by."""

    name: str
    can_pick: bool
    can_pick_shapes: bool
    can_feed_back: bool
    can_feed_back_shapes: bool
    feed_back_shapes_apart: bool


@dataclass(frozen=True)
class SpaceView(Listing):
    """A described Space: its configs and shapes as JSON values (each dict in its own key order, for
    labels), what the worker checks (`read`: Space.as_read()), whether it has a compile step, its
    tuner's abilities; `saved`: read from this user's saved views rather than from a child."""

    name: str
    configs: list[Any]
    shapes: list[Any] | None
    compiles: bool
    tuner: TunerView | None
    read: dict = field(repr=False)
    saved: bool = False

    @property
    def fingerprint(self) -> str:
        return self.read["fingerprint"]

    def as_read(self) -> dict:
        return self.read


def describe(space) -> dict:
    """What nsprof's process needs of a loaded Space, as JSON values (SpaceView's fields)."""
    plain = json.loads(json.dumps({"configs": space.configs, "shapes": space.shapes}, default=str))
    tuner = space.tuner
    return {
        "format": FORMAT,
        "name": space.name,
        **plain,
        "compiles": space.compiles,
        "tuner": None
        if tuner is None
        else {"name": tuner.name, **{a: bool(getattr(tuner, a)) for a in TUNER_ABILITIES}},
        "read": space.as_read(),
    }


def view_of(doc: dict, saved: bool = False) -> SpaceView:
    tuner = doc["tuner"]
    return SpaceView(
        name=doc["name"],
        configs=doc["configs"],
        shapes=doc["shapes"],
        compiles=doc["compiles"],
        tuner=None if tuner is None else TunerView(**tuner),
        read=doc["read"],
        saved=saved,
    )


def read_target(spec: str, fresh: bool = False) -> SpaceView:
    """TARGET's SpaceView: the saved one for its source as it is now, else (or with `fresh`) one a
    child described, saved for the next run. A target that does not load: its one line (TargetError)."""
    where, attr = split_target(spec)
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    if is_file and not Path(where).is_file():
        raise TargetError(f"target file {where} does not exist")
    try:
        fingerprint = target_fingerprint(spec)
    except OSError as exc:
        raise TargetError(f"reading the source of {where} failed: {exc}") from exc
    place = str(Path(where).resolve()) if is_file else f"{os.getcwd()}|{where}"
    key = json.dumps([FORMAT, place, attr, fingerprint, sys.executable, os.environ.get("PYTHONPATH", "")])
    path = _saved_path(hashlib.sha256(key.encode()).hexdigest()[:32])
    if path is not None and not fresh:
        doc = _read_saved(path)
        if doc is not None and doc.get("format") == FORMAT and doc["read"]["fingerprint"] == fingerprint:
            return view_of(doc, saved=True)
    doc = _describe_in_child(spec)
    # The child fingerprints after its import: another fingerprint means the source changed meanwhile,
    # and that description is used, never saved under the source nsprof fingerprinted before.
    if path is not None and doc["read"]["fingerprint"] == fingerprint:
        _save(path, doc)
    return view_of(doc)


def _describe_in_child(spec: str) -> dict:
    """The child's description of TARGET (its output: one JSON document; what the target prints goes
    to nsprof's standard error), or its one line of error (TargetError)."""
    import subprocess

    from nsprof.host.children import dies_with_nsprof

    done = subprocess.run(
        [sys.executable, "-m", "nsprof.space_view", spec],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=dies_with_nsprof(),
        check=False,
    )
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise TargetError(
            f"reading {spec} failed: the process that imported it ended without describing it "
            f"(exit status {done.returncode}; what it printed is above)"
        )
    if "error" in doc:
        raise TargetError(doc["error"])
    return doc


def _saved_path(name: str) -> Path | None:
    """Where this user's saved view `name` is: in a folder of this user's own that nobody else may write
    ($XDG_CACHE_HOME/nsprof/targets, else ~/.cache/...); None (nothing saved or read) where there is none."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "nsprof" / "targets"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    return folder / f"{name}.json"


def _read_saved(path: Path) -> dict | None:
    """A saved description, if it is this user's own file that nobody else can write, and whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        try:
            doc = json.loads(file.read())
        except ValueError:
            return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("read"), dict) else None


def _save(path: Path, doc: dict) -> None:
    """Write `doc` whole or not at all (a reader never sees half of it); a full disk saves nothing."""
    import tempfile

    try:
        fd, part = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(doc, file)
        os.replace(part, path)
    except OSError:
        Path(part).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """The child: load TARGET, print its description (or {"error": its one line}) as the only output on
    standard output; what the target's import prints goes to standard error."""
    from nsprof.space import load_target

    (spec,) = argv if argv is not None else sys.argv[1:]
    out = os.dup(1)
    os.dup2(2, 1)
    try:
        doc = describe(load_target(spec))
    except TargetError as exc:
        doc = {"error": str(exc)}
    except Exception as exc:  # the target's own code raised: its one line, not a traceback
        doc = {"error": f"loading {spec} failed: {type(exc).__name__}: {exc}"}
    with os.fdopen(out, "w") as file:
        json.dump(doc, file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The target as nsprof's own process sees it, without importing it (no torch, no TileLang, no
Triton in nsprof's process): what a child process that imported it described, saved for this user
so that the next run over the same source reads it without a child.

- SpaceView: a Space's read-only face (configs, shapes, points, labels, as_read, the tuner's
  abilities), all that nsprof's process asks of a target; the worker, the compile step and the
  tuner's child import the target themselves, and the worker checks it against `as_read()`;
- describe: what the child sends of the Space it loaded;
- read_target: the SpaceView of a target: the one saved under its source's fingerprint, else one
  described by a child (`python -m nsprof.space_view TARGET`: `main`) and saved.

A saved view is keyed by the target's static fingerprint (nsprof.space.target_fingerprint), its
place, the Python, PYTHONPATH and nsprof's version. What the fingerprint cannot see (configs read
from a data file, an environment variable, a tuner hook in an installed library) can leave a saved
view behind the target. So a saved view is checked while it is used: a child describes the target
again at once, beside the run (its import overlaps the worker's). What rests on the view alone waits
for that check (SpaceView.confirm: a ranking of stored rows, the tuner's calls), and a run that fails
or ends on a view found behind the target runs once more on the target as it is
(nsprof.commands.common.on_target).
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

from nsprof.errors import TargetChanged, TargetError
from nsprof.space import Listing, split_target, target_fingerprint

FORMAT = 1  # of a description: a saved one of another format is read afresh
KEEP_DAYS = 30  # a saved view nobody read for this long is removed (_prune)
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
    # A saved view's check: a child describing the target again meanwhile (None: described just now)
    check: _Check | None = field(default=None, compare=False, repr=False)

    @property
    def saved(self) -> bool:
        return self.check is not None

    @property
    def fingerprint(self) -> str:
        return self.read["fingerprint"]

    def refreshed(self) -> SpaceView | None:
        """The target as its check describes it now where this saved view is behind it (saved in its
        place); None where the view is the target's, or was described just now. Waits for the check."""
        if self.check is None:
            return None
        doc = self.check.described()
        return None if doc == self.check.saved else view_of(doc)

    def confirm(self) -> None:
        """TargetChanged where this saved view is behind the target: what rests on the view alone (a
        ranking of stored rows, the tuner's calls) must not go on."""
        if self.refreshed() is not None:
            raise TargetChanged(f"nsprof's saved description of {self.check.spec} is behind it: read again")

    def close(self) -> None:
        if self.check is not None:
            self.check.close()

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


def view_of(doc: dict, check: _Check | None = None) -> SpaceView:
    tuner = doc["tuner"]
    return SpaceView(
        name=doc["name"],
        configs=doc["configs"],
        shapes=doc["shapes"],
        compiles=doc["compiles"],
        tuner=None if tuner is None else TunerView(**tuner),
        read=doc["read"],
        check=check,
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
    from nsprof import __version__

    place = str(Path(where).resolve()) if is_file else f"{os.getcwd()}|{where}"
    python = [sys.executable, os.environ.get("PYTHONPATH", ""), __version__]
    key = json.dumps([FORMAT, place, attr, fingerprint, *python])
    path = _saved_path(hashlib.sha256(key.encode()).hexdigest()[:32])
    saved = _read_saved(path) if path is not None and not fresh else None
    if (
        saved is not None
        and saved.get("format") == FORMAT
        and saved["read"].get("fingerprint") == fingerprint
    ):
        return view_of(saved, _Check(spec, path, fingerprint, saved))
    return view_of(_Check(spec, path, fingerprint).described())


class _Check:
    """A child that imports TARGET and describes it (`python -m nsprof.space_view TARGET`), started at
    once; described() waits for its description, saves it at `path` (where the child read the source
    nsprof fingerprinted: `fingerprint`), and compares it with `saved`, the description it checks."""

    def __init__(self, spec: str, path: Path | None, fingerprint: str, saved: dict | None = None) -> None:
        import subprocess

        from nsprof.host.children import dies_with_nsprof

        self.spec, self.path, self.fingerprint, self.saved = spec, path, fingerprint, saved
        self.doc: dict | None = None
        # What the target prints goes to nsprof's standard error; standard output is the description alone.
        self.child = subprocess.Popen(
            [sys.executable, "-m", "nsprof.space_view", spec],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=dies_with_nsprof(),
        )

    def described(self) -> dict:
        """The child's description, or its one line of error (TargetError)."""
        if self.doc is None:
            out, _ = self.child.communicate()
            try:
                doc = json.loads(out)
            except ValueError:
                doc = None
            if not isinstance(doc, dict):
                raise TargetError(
                    f"reading {self.spec} failed: the process that imported it ended without describing it "
                    f"(exit status {self.child.returncode}; what it printed is above)"
                )
            if "error" in doc:
                raise TargetError(doc["error"])
            # The child fingerprints after its import: another fingerprint means the source changed
            # meanwhile; that description is used, never saved under the source fingerprinted before.
            if self.path is not None and doc != self.saved and doc["read"]["fingerprint"] == self.fingerprint:
                _save(self.path, doc)
            self.doc = doc
        return self.doc

    def close(self) -> None:
        if self.child.poll() is None:
            self.child.kill()
            self.child.communicate()


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
        os.utime(file.fileno())  # read now: kept another KEEP_DAYS (_prune)
        try:
            doc = json.loads(file.read())
        except ValueError:
            return None
    whole = isinstance(doc, dict) and {"name", "configs", "shapes", "compiles", "tuner", "read"} <= set(doc)
    return doc if whole and isinstance(doc["read"], dict) and "fingerprint" in doc["read"] else None


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
        return
    _prune(path.parent)


def _prune(folder: Path) -> None:
    """Remove the saved views nobody read for KEEP_DAYS (a reading touches its file), and what a writer
    killed mid-write left: one view per source edit would otherwise pile up."""
    import time

    old = time.time() - KEEP_DAYS * 86400
    for file in [*folder.glob("*.json"), *folder.glob(".part-*")]:
        try:
            if file.lstat().st_mtime < old:
                file.unlink()
        except OSError:
            continue  # another nsprof removed it first


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

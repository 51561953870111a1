"""The target as nsprof's own process sees it, without importing it (no torch, no TileLang, no
Triton in nsprof's process): what a child process that imported it described, saved for this user
so that the next run over the same source reads it without waiting for an import.

- SpaceView: a Space's read-only face (configs, shapes, points, labels, as_read with the compile
  step and the tuner's abilities), all that nsprof's process asks of a target; the worker, the
  compile step and the tuner's child import the target themselves;
- describe: what the child sends of the Space it loaded;
- read_target: the SpaceView of a target: the one saved under its source's fingerprint, else one
  described by a child (`python -m nsprof.space_view TARGET`: `main`) and saved.

A saved view is keyed by the target's static fingerprint (nsprof.space_source.target_fingerprint), its
place, the Python, PYTHONPATH and nsprof's version. What the fingerprint cannot see (configs read
from a data file, an environment variable, a tuner hook in a library) can leave a saved view behind
the target, so a saved view is checked, never trusted: every worker checks what it loads against the
view's `as_read()` (configs, shapes, fingerprint, compile step; a tune's tuner too) and measures
nothing where it differs; what rests on the view with no worker to check it (a ranking of rows the
store held already, a config id it does not list) asks a child first (SpaceView.confirm). A run
refused on a view found behind the target runs once more on the target as it is
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
from types import SimpleNamespace
from typing import Any

from nsprof.errors import NsprofError, TargetChanged, TargetError
from nsprof.space import Listing, read_changes, target_file
from nsprof.space_source import split_target, target_fingerprint

FORMAT = 3  # of a description: a saved one of another format is read afresh
KEEP_DAYS = 30  # a saved view nobody read for this long is removed (_prune)


@dataclass(frozen=True)
class SpaceView(Listing):
    """A described Space of target `spec`: its configs and shapes as JSON values (each dict in its own
    key order, for labels), what a worker checks (`read`: Space.as_read()); `saved`: read from this
    user's saved views, not described just now."""

    spec: str
    name: str
    configs: list[Any]
    shapes: list[Any] | None
    read: dict = field(repr=False)
    saved: bool = False
    bound_s: float = 0.0  # how long a child's import of the target may take (read_target)
    # the target described again, once (refreshed): [] until then, [its view or None]
    _fresh: list = field(default_factory=list, compare=False, repr=False)

    @property
    def fingerprint(self) -> str:
        return self.read["fingerprint"]

    def as_read(self) -> dict:
        return self.read

    @property
    def compiles(self) -> str:
        return self.read.get("compiles") or ""

    @property
    def tuner(self) -> SimpleNamespace | None:
        """The tuner hook's name and abilities (nsprof.space.TUNER_ABILITIES), as attributes: what tune
        decides its calls by."""
        tuner = self.read.get("tuner")
        return None if tuner is None else SimpleNamespace(**tuner)

    def refreshed(self) -> tuple[SpaceView, str] | None:
        """(the target as a child describes it now, how this saved view differs from it) where the view
        is behind the target; None where it is not, or was described just now."""
        if not self.saved:
            return None
        if not self._fresh:
            fresh = read_target(self.spec, fresh=True, bound_s=self.bound_s)
            why = read_changes(fresh.read, self.read)
            self._fresh.append(None if why is None else (fresh, why))
        return self._fresh[0]

    def confirm(self) -> None:
        """TargetChanged where this saved view is behind the target: what would rest on the view with no
        worker to check it (a ranking of rows the store held already, a config id it does not list)
        must not go on."""
        behind = self.refreshed()
        if behind is not None:
            raise TargetChanged(
                f"the target {self.spec} changed since nsprof saved its description: {behind[1]}"
            )


def describe(space) -> dict:
    """What nsprof's process needs of a loaded Space, as JSON values (SpaceView's fields)."""
    from nsprof.store_rows import plain

    values = json.loads(json.dumps({"configs": space.configs, "shapes": space.shapes}, default=plain))
    return {"format": FORMAT, "name": space.name, **values, "read": space.as_read()}


def read_target(spec: str, bound_s: float, fresh: bool = False) -> SpaceView:
    """TARGET's SpaceView: the saved one for its source as it is now, else (or with `fresh`) one a
    child described (its import bounded by `bound_s`), saved for the next run. A target that does not
    load: its one line (TargetError)."""
    from nsprof import __version__

    where, attr = split_target(spec)
    is_file = target_file(where) is not None
    try:
        fingerprint = target_fingerprint(spec)
    except OSError as exc:
        raise TargetError(f"reading the source of {where} failed: {exc}") from exc
    place = str(Path(where).resolve()) if is_file else f"{os.getcwd()}|{where}"
    python = [sys.executable, os.environ.get("PYTHONPATH", ""), __version__]
    key = json.dumps([FORMAT, place, attr, fingerprint, *python])
    path = _saved_path(hashlib.sha256(key.encode()).hexdigest()[:32])
    saved = _read_saved(path) if path is not None and not fresh else None
    if saved is not None and saved.get("format") == FORMAT and saved["read"]["fingerprint"] == fingerprint:
        return _view(spec, saved, bound_s, saved=True)
    doc = _described(spec, bound_s)
    # The child fingerprints after its import: another fingerprint means the source changed meanwhile;
    # that description is used, never saved under the source fingerprinted before.
    if path is not None and doc["read"]["fingerprint"] == fingerprint:
        _save(path, doc)
    return _view(spec, doc, bound_s)


def _view(spec: str, doc: dict, bound_s: float, saved: bool = False) -> SpaceView:
    for kind, values in (("config", doc["configs"]), ("shape", doc["shapes"] or [])):
        for i, value in enumerate(values):
            try:
                json.dumps(value, ensure_ascii=False).encode()
            except UnicodeEncodeError:  # a lone surrogate: no table, store or output could write it
                raise TargetError(
                    f"{spec}: {kind} {i} holds text that is not valid Unicode (a lone surrogate, "
                    f"{json.dumps(value)[:120]}): no table or file could hold it"
                ) from None
    return SpaceView(spec, doc["name"], doc["configs"], doc["shapes"], doc["read"], saved, bound_s)


def _described(spec: str, bound_s: float) -> dict:
    """The description of TARGET by a child that imports it (what the target prints goes to nsprof's
    standard error), or its one line of error (TargetError), also where it takes longer than `bound_s`.
    The child is a process group of its own: Ctrl-C is nsprof's to handle, and nothing the target's
    import started outlives the child."""
    import contextlib
    import signal
    import subprocess

    from nsprof.host.children import dies_with_nsprof, python_module
    from nsprof.host.gpu import child_environ

    child = subprocess.Popen(
        python_module(sys.executable, "nsprof.space_view", spec),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=dies_with_nsprof(),
        env=child_environ(),  # a target whose import touches CUDA sees the worker's GPU
    )
    try:
        out, _ = child.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        raise TargetError(
            f"importing {spec} took longer than {bound_s:g} s: it hangs, or needs a longer --timeout"
        ) from None
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(child.pid, signal.SIGKILL)  # what the import left running; the child if nsprof stops
        child.wait()
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise TargetError(
            f"reading {spec} failed: the process that imported it ended without describing it "
            f"(exit status {child.returncode}; what it printed is above)"
        )
    if "error" in doc:
        raise TargetError(doc["error"])
    return doc


def _saved_path(name: str) -> Path | None:
    """Where this user's saved view `name` is: in a folder of this user's own that nobody else may write or
    move away ($XDG_CACHE_HOME/nsprof/targets, else ~/.cache/...: owned.kept_folder); None (nothing saved
    or read) where there is none."""
    from nsprof.host.owned import kept_folder

    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, or relative: ignored, as the XDG spec says
        base = os.path.join(os.path.expanduser("~"), ".cache")
    try:  # no one else may rename it, or a folder above it, away: it is written and pruned by name
        return kept_folder(Path(base) / "nsprof" / "targets", "the saved targets' folder") / f"{name}.json"
    except (NsprofError, OSError):  # nothing saved or read: the command goes on without
        return None


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
    whole = isinstance(doc, dict) and {"name", "configs", "shapes", "read"} <= set(doc)
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
    from nsprof.space import load_target, raised

    (spec,) = argv if argv is not None else sys.argv[1:]
    out = os.dup(1)
    os.dup2(2, 1)
    try:  # dumped here too: a Space holding what JSON cannot (a tuner's bytes name) is its one line as well
        text = json.dumps(describe(load_target(spec)))
    except TargetError as exc:
        text = json.dumps({"error": str(exc)})
    except BaseException as exc:  # the target's own code raised: its one line, not a traceback
        # sys.exit() and KeyboardInterrupt too: this child is a session of its own (_described), so no
        # Ctrl-C of the user's reaches it, and nsprof ends it with SIGKILL, which raises nothing
        text = json.dumps({"error": f"loading {spec} failed: {raised(exc)}"})
    with os.fdopen(out, "w") as file:
        file.write(text)
    return 0


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # described: no wait for a thread the target's import left running, nor its exit handlers

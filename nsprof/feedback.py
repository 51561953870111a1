"""What `nsprof tune` asks of the target's own autotuner (its Space's TunerHook, nsprof.tuner), each
call in a fresh child process (`python -m nsprof.feedback`):

- tuner_children: the calls tune will make at its end, each in a child started when tune starts,
  so that the child's import of the target (torch, the tuner) overlaps the measuring;
- tuner_picks: what the tuner picks itself, with its own timer, at each shape;
- feed_back: the deploy truth's ranking into the tuner's cache, at each shape;
- TunerChild: one hook call in a child, its result back as JSON; the child is this module's
  `main` (`python -m nsprof.feedback TARGET CALL ARGS_JSON`, or `@FILE`: the arguments come later);
  tuner_in_child: a call in a child started for it.

A target without shapes is one shape (shape None): its hook's pick() and feed_back(); with shapes,
pick_shapes() and feed_back_shapes(). A failure of the user's tuner is one line in the report's
errors: the ranking stands, and the command exits non-zero after printing it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from nsprof.analysis import crosstruth
from nsprof.errors import NsprofError
from nsprof.render.tune_tables import describe_pick
from nsprof.reports.checks import one_line
from nsprof.settings import TuneSettings

__all__ = ["TunerChild", "feed_back", "tuner_children", "tuner_in_child", "tuner_picks"]

RESULT_MARKER = "NSPROF_RESULT "  # the child's line that carries the call's result, as JSON
TUNER_CALLS = ("pick", "pick_shapes", "feed_back", "feed_back_shapes")


class TunerChild:
    """A child process for one call of the target Space's tuner hook, `space.tuner.<name>(*args)`
    (one of TUNER_CALLS). It imports the target at once, then waits for the call's arguments on
    stdin: `call` sends them and reads the result back as JSON; `close` stops it uncalled.

    Its own benchmark loop runs user kernels: a child keeps a hang (timeout: the per-config
    timeout times the number of configs) or a lost CUDA context out of nsprof's process, and
    the GPU lock, taken for the call, keeps other nsprof runs off the GPU meanwhile. A fresh
    process also computes the tuner's cache key exactly as the user's own next process will
    (TileLang's key is not the same in a process that has compiled configs already).
    """

    def __init__(self, target: str, name: str):
        import subprocess
        import sys
        import tempfile

        from nsprof.host.children import dies_with_nsprof, python_module
        from nsprof.host.gpu import child_environ

        if name not in TUNER_CALLS:
            raise ValueError(f"a tuner hook call is one of {TUNER_CALLS}, not {name!r}")
        # Files, not pipes, both ways: a pipe read only at the call would stall a child that prints
        # much while it imports (and whatever it holds then), and arguments larger than a pipe's
        # buffer would stall nsprof behind a child whose import hangs. Only "go" goes through stdin.
        # Every file is unnamed (nothing left on disk however nsprof ends, nothing another user
        # can open by name): the child reads the arguments' file through the descriptor it inherits.
        # Read back with undecodable bytes replaced: a tuner's output is not ours to trust as UTF-8.
        self.out = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self.err = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self.args = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            python_module(
                sys.executable, "nsprof.feedback", target, name, f"@/proc/self/fd/{self.args.fileno()}"
            ),
            pass_fds=(self.args.fileno(),),
            stdin=subprocess.PIPE,
            stdout=self.out,
            stderr=self.err,
            text=True,
            preexec_fn=dies_with_nsprof(),  # gone with nsprof, even one SIGKILLed
            start_new_session=True,  # with what it starts (compilers, helpers): close kills the group
            env=child_environ(),  # its kernels on the GPU nsprof locked
        )

    def call(self, args: list, settings: TuneSettings, n_configs: int):
        from nsprof.host.children import wait_exit

        timeout = settings.timeout_s * max(1, n_configs)
        with _gpu_for_the_tuner(settings.wait, timeout):
            self.args.write(json.dumps(args))
            self.args.flush()
            with contextlib.suppress(BrokenPipeError):  # it exited already: its status and stderr say why
                self.proc.stdin.write("go\n")
                self.proc.stdin.close()
            if wait_exit(self.proc, timeout) is None:
                self.close()
                raise NsprofError(f"it ran past {timeout:g} s (--timeout times the number of configs)")
        out, err = self._read(self.out), self._read(self.err)
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_MARKER):
                return json.loads(line[len(RESULT_MARKER) :])
        lines = [line.strip() for line in err.splitlines() if line.strip()]
        raise NsprofError(
            f"its process exited with status {self.proc.returncode}" + (f": {lines[-1]}" if lines else "")
        )

    @staticmethod
    def _read(file) -> str:
        file.seek(0)
        return file.read()

    def close(self) -> None:
        """Stop the child (it is importing, waiting for a call that will not come, or past its call's
        bound) with what it started, and reap it."""
        from nsprof.host.children import exit_code, kill_group

        if exit_code(self.proc) is None:  # unreaped: its group is still its own to kill
            kill_group(self.proc)
        for file in (self.proc.stdin, self.out, self.err, self.args):
            with contextlib.suppress(OSError):
                file.close()


def tuner_in_child(target: str, name: str, args: list, settings: TuneSettings, n_configs: int):
    """`space.tuner.<name>(*args)` in a child process started for it (TunerChild)."""
    return _call(None, None, target, name, args, settings, n_configs)


@contextlib.contextmanager
def _gpu_for_the_tuner(wait: bool, timeout_s: float):
    """The GPU for a tuner call (it runs user kernels): its lock, or, where this user's `nsprof serve`
    holds the lock (it does for as long as it serves), a lease of the GPU between its jobs; from a
    server that is ending, the lock once it lets it go (within the call's bound). Asked without
    waiting first: waiting for the lock of a server would wait for the server's exit."""
    from nsprof.errors import GpuBusy
    from nsprof.host.lock import gpu_lock
    from nsprof.serve_client import ServerEnding, holding_server, lease

    held = contextlib.ExitStack()
    try:
        held.enter_context(gpu_lock(0))
    except GpuBusy as exc:
        server = holding_server((exc.holder or {}).get("pid"))
        if server is not None:
            try:
                held.enter_context(lease(server, timeout_s))
            except ServerEnding:  # it lets the GPU go once what it has in hand ends
                held.enter_context(gpu_lock(0, wait=True, timeout_s=timeout_s))
        elif wait:
            held.enter_context(gpu_lock(0, wait=True))
        else:
            raise
    with held:
        yield


@contextlib.contextmanager
def tuner_children(target: str, space, settings: TuneSettings):
    """The tuner calls tune will make at its end ({key: TunerChild}, keys as _calls_ahead gives
    them), each child started now so that its import overlaps the measuring; those left uncalled
    are stopped at the end."""
    children: dict = {}
    try:
        for key, name in _calls_ahead(space, settings):
            children[key] = TunerChild(target, name)
        yield children
    finally:
        for child in children.values():
            child.close()


def _calls_ahead(space, settings: TuneSettings) -> list[tuple]:
    """(key, hook call) of every call tuner_picks and feed_back will make: "pick", "feed_back", or
    ("feed_back", shape) for a hook that takes each shape in a process of its own."""
    tuner, shaped = space.tuner, space.points.shaped
    if tuner is None:
        return []
    calls: list[tuple] = []
    if settings.tuner_pick and tuner.can_pick and (tuner.can_pick_shapes or not shaped):
        calls.append(("pick", "pick_shapes" if shaped else "pick"))
    if settings.feed_back and tuner.can_feed_back and (tuner.can_feed_back_shapes or not shaped):
        if shaped and tuner.feed_back_shapes_apart:
            calls += [(("feed_back", shape), "feed_back_shapes") for shape in range(space.points.n_shapes)]
        else:
            calls.append(("feed_back", "feed_back_shapes" if shaped else "feed_back"))
    return calls


def _call(children: dict | None, key, target: str, name: str, args: list, settings, n_configs: int):
    """The call `name` through the child started ahead for `key`, or through one started now."""
    child = (children or {}).pop(key, None) or TunerChild(target, name)
    try:
        return child.call(args, settings, n_configs)
    finally:
        child.close()


def _failed(exc: Exception) -> str:
    """A failure in one line: nsprof's own words as they are, a user error with its type."""
    return one_line(str(exc) if isinstance(exc, NsprofError) else f"{type(exc).__name__}: {exc}", 300)


def tuner_picks(
    target: str, space, rankings: dict, settings: TuneSettings, notes: dict, errors: list, children=None
) -> dict:
    """What the target's tuner picks itself at each shape, {shape: pick} (rankings: the deploy
    truth's, {shape: Ranking}), with a line in `notes` ({shape: list}) comparing it to the ranking;
    {} where the tuner cannot pick or nothing was measured. A failure: one line in `errors`.
    `children`: the calls' children started ahead (tuner_children)."""
    tuner = space.tuner
    measured = {shape: r for shape, r in rankings.items() if r.best_config_id is not None}
    if not (settings.tuner_pick and tuner is not None and tuner.can_pick and measured):
        return {}
    n, first = len(space.configs), next(iter(rankings))
    try:
        if not space.points.shaped:
            picks = {None: _call(children, "pick", target, "pick", [], settings, n)}
        elif not tuner.can_pick_shapes:
            notes[first].append(f"{tuner.name}'s own pick is not asked: its hook picks at one shape only")
            return {}
        else:
            got = _call(
                children, "pick", target, "pick_shapes", [list(measured)], settings, n * len(measured)
            )
            picks = {int(shape): pick for shape, pick in got.items()}
    except Exception as exc:  # the user's tuner failed: the ranking still stands
        errors.append(f"the target's own autotuner failed: {_failed(exc)}")
        return {}
    picked = {shape: picks.get(shape) for shape in measured if picks.get(shape) is not None}
    for shape, pick in picked.items():  # None: the tuner could not say
        notes[shape].append(describe_pick(pick, measured[shape].table))
    return picked


def feed_back(
    target: str, space, rankings: dict, settings: TuneSettings, notes: dict, errors: list, children=None
) -> None:
    """Every measured shape's ranking handed to the target's tuner (rankings: the deploy truth's,
    {shape: Ranking}), each under the key the tuner computes for a call at that shape, in one child
    process (or one per shape: TunerHook.feed_back_shapes_apart); a line in `notes` ({shape: list})
    says what was stored at each shape, one in `errors` what failed. `children`: as tuner_picks'."""
    tuner = space.tuner
    if not (settings.feed_back and tuner is not None and tuner.can_feed_back):
        return
    latencies = {}
    for shape, ranking in rankings.items():
        table = ranking.table
        measured = table[table["error"].isna() & table["value_ns"].notna()]
        if ranking.best_config_id is not None:
            latencies[shape] = {
                int(c): float(v) / 1e6 for c, v in zip(measured["config_id"], measured["value_ns"])
            }
    if not latencies:
        return
    first, n = next(iter(rankings)), len(space.configs)
    shaped = space.points.shaped
    if shaped and not tuner.can_feed_back_shapes:
        notes[first].append(
            f"not fed back: {tuner.name} takes the ranking of one shape only (its hook has no feed_back_shapes)"
        )
        return
    stored = _fed_back(target, tuner, latencies, settings, children, n, shaped, errors)
    labels = rankings[first].labels
    words = crosstruth.condition_words(labels, labels.get("mode"))
    for shape in rankings:
        line = stored.get(None if shape is None else str(shape))
        if shape is not None and isinstance(line, dict):  # that shape failed (each_shape); the others stand
            errors.append(f"feeding shape {shape}'s ranking back to {tuner.name} failed: {line.get('error')}")
        elif line is not None:
            notes[shape].append(
                f"handed to {tuner.name} for deploy condition {settings.deploy_truth.name} ({words}): {line}"
            )


def _fed_back(target, tuner, latencies: dict, settings, children, n: int, shaped: bool, errors: list) -> dict:
    """The tuner's answers by shape ({None: line} without shapes; JSON's string keys with), from one child
    process, or one per shape (feed_back_shapes_apart); a call that failed whole is said in `errors`."""
    calls = (
        [("feed_back", "feed_back", [latencies[None]], n)]
        if not shaped
        else [(("feed_back", s), "feed_back_shapes", [{s: by}], n) for s, by in latencies.items()]
        if tuner.feed_back_shapes_apart  # each shape's key computed in a process of its own
        else [("feed_back", "feed_back_shapes", [latencies], n * len(latencies))]
    )
    stored: dict = {}
    for key, name, args, n_configs in calls:
        what = f"shape {key[1]}'s ranking" if isinstance(key, tuple) else f"the ranking{'s' * shaped}"
        try:
            got = _call(children, key, target, name, args, settings, n_configs)
        except Exception as exc:  # noqa: BLE001 - the user's tuner: the ranking still stands
            errors.append(f"feeding {what} back to {tuner.name} failed: {_failed(exc)}")
            continue
        stored.update({None: got} if not shaped else got if isinstance(got, dict) else {})
    return stored


def _arguments(name: str, args: list) -> list:
    """A call's arguments as the hook takes them: JSON made every mapping's keys strings."""
    if name == "feed_back":
        return [{int(k): float(v) for k, v in args[0].items()}]
    if name == "feed_back_shapes":
        return [{int(s): {int(k): float(v) for k, v in by.items()} for s, by in args[0].items()}]
    if name == "pick_shapes":
        return [[int(s) for s in args[0]]]
    return list(args)


def main(argv: list[str] | None = None) -> None:
    """One hook call in this process: `TARGET CALL ARGS_JSON` (`@FILE`: the arguments are in FILE once
    stdin says "go", after the target's import); its result printed after RESULT_MARKER."""
    import sys

    from nsprof.space import load_target

    target, name, args = (sys.argv[1:] if argv is None else argv)[:3]
    if name not in TUNER_CALLS:
        sys.exit(f"a tuner hook call is one of {TUNER_CALLS}, not {name!r}")
    tuner = load_target(target).tuner
    if tuner is None:
        sys.exit(f"{target} has no tuner hook (Space.tuner)")
    if args.startswith("@"):  # started ahead (TunerChild): the arguments come in that file on "go"
        if sys.stdin.read().strip() != "go":
            return  # stopped uncalled
        args = Path(args[1:]).read_text()
    result = getattr(tuner, name)(*_arguments(name, json.loads(args)))
    print(RESULT_MARKER + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()

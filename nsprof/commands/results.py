"""`nsprof results`: list the runs of the results store, export its measurements, rank a stored
tune again and draw it (nsprof.tune.saved), or print and draw a tune saved by tune --json or a
validate run saved by validate --save (a .json STORE): no GPU, no profiler, the target not imported."""

from __future__ import annotations

from pathlib import Path

import click

from nsprof.errors import NsprofError, OptionError

MAX_SAVED_BYTES = 1 << 30  # a saved run past it is none nsprof wrote (the largest it writes are tens of MB)


def results(
    store: Path | None,
    store_path: Path | None,
    export_path: str | None = None,
    target: str | None = None,
    run_id: int | None = None,
    *,
    plot_path: str | None = None,
    html_path: str | None = None,
    as_json: bool = False,
) -> int:
    """The runs of results store `store` (or `store_path`: --store), its measurements exported, one
    stored tune ranked again (`target` or `run_id`), or the run that tune --json or validate --save
    saved in a .json file; the exit status (1: as tune's)."""
    from nsprof.commands.common import refuse_clobbering
    from nsprof.store import DEFAULT_PATH

    if store is not None and store_path is not None and store != store_path:
        raise OptionError(f"two results stores given ({store} and --store {store_path}): give one")
    store_path = store or store_path
    saved = store_path is not None and store_path.suffix.lower() == ".json"
    read = ("the saved run", store_path) if saved else ("the results store", store_path or DEFAULT_PATH)
    refuse_clobbering({"--export": export_path, "--plot": plot_path, "--html": html_path}, [read])
    # a tune --json or validate --save, not a store
    if saved:
        given = {"--export": export_path, "--target": target, "--run": run_id}
        for option, value in given.items():
            if value:
                raise OptionError(
                    f"{store_path} is a saved run (tune --json, validate --save), not a results store: "
                    f"it takes no {option}"
                )
        return _saved(store_path, plot_path=plot_path, html_path=html_path, as_json=as_json)
    outputs = {"--plot": plot_path, "--html": html_path, "--json": as_json}
    if target is not None and run_id is not None:
        raise OptionError("rank one stored tune: --target or --run, not both")
    if target is None and run_id is None:
        for option, given in outputs.items():
            if given:
                raise OptionError(f"{option} needs --target or --run (the stored tune to rank)")
    elif export_path:
        raise OptionError("--export writes every stored measurement: it takes no --target or --run")
    path = store_path or DEFAULT_PATH
    if not Path(path).exists():
        raise NsprofError(f"no results store at {path} (nsprof tune writes one)")
    if Path(path).is_file() and Path(path).stat().st_size == 0 and not Path(f"{path}-wal").exists():
        # reading would make it one: a file the user named by mistake is left as it is
        raise NsprofError(f"{path} is empty: not a results store (nsprof tune writes one)")
    if target is not None or run_id is not None:
        return _ranked(path, target, run_id, plot_path=plot_path, html_path=html_path, as_json=as_json)
    return _listed(path, export_path)


def _listed(path, export_path: str | None) -> int:
    """The runs of the store at `path` listed, or its measurements exported (--export)."""
    from nsprof.commands.common import csv_on_stdout
    from nsprof.store import ResultStore

    with ResultStore(path) as store:
        if export_path == "-":
            frame = store.frame()
            csv_on_stdout(frame)
            click.echo(f"wrote {len(frame)} measurements to standard output (CSV)", err=True)
            return 0
        if export_path:
            count = store.export(export_path)
            click.echo(f"wrote {count} measurements to {export_path}")
            return 0
        runs = store.runs()
        counts = store.frame().groupby("run_id").size() if len(runs) else {}
    from nsprof.render.run_tables import format_runs

    click.echo(format_runs(runs, counts))
    return 0


def _ranked(path, target, run_id, *, plot_path, html_path, as_json) -> int:
    """A stored tune ranked again, printed and drawn as tune prints and draws it."""
    from nsprof.commands.common import check_plot, one_on_stdout
    from nsprof.commands.tune import show
    from nsprof.store import ResultStore
    from nsprof.tune.saved import reread

    one_on_stdout(**{"--plot -": plot_path == "-", "--html -": html_path == "-", "--json": as_json})
    check_plot(plot_path)
    with ResultStore(path) as store:
        result = reread(store, target=target, run_id=run_id)
        name = target or _run_target(store, run_id)
    return show(name, result, plot_path=plot_path, html_path=html_path, as_json=as_json)


def _saved(path: Path, *, plot_path, html_path, as_json) -> int:
    """A tune saved by tune --json, or a validate run saved by validate --save, printed and drawn
    as the command printed and drew it."""
    from nsprof.commands.common import check_plot, one_on_stdout

    one_on_stdout(**{"--plot -": plot_path == "-", "--html -": html_path == "-", "--json": as_json})
    check_plot(plot_path)
    text = _saved_text(path)
    outputs = {"plot_path": plot_path, "html_path": html_path, "as_json": as_json}
    try:
        validate = _saved_validate(text)
        if validate is not None:
            from nsprof.commands.validate import show as show_validate

            show_validate(*validate, **outputs)
            return 0
        from nsprof.commands.tune import show
        from nsprof.render.json import load_tune

        report = load_tune(text)
    except NsprofError as exc:
        raise NsprofError(f"{path}: {exc}") from None
    return show(report.target, report, **outputs)


def _saved_text(path: Path) -> str:
    """The text of a saved run: a regular file (a FIFO or a device, /dev/zero say, is no saved run, and
    reading one would wait or grow for good) of at most MAX_SAVED_BYTES, as UTF-8."""
    from nsprof.reports.inputs import open_regular

    try:
        handle, _ = open_regular(path, MAX_SAVED_BYTES)
        with handle:
            data = handle.read(MAX_SAVED_BYTES + 1)
        if len(data) > MAX_SAVED_BYTES:  # grown since its size was read
            raise ValueError(f"more than {MAX_SAVED_BYTES} bytes")
        return data.decode("utf-8")
    except OSError as exc:
        raise NsprofError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise NsprofError(f"cannot read {path}: not UTF-8 text (not a run nsprof saved)") from None
    except ValueError as exc:
        raise NsprofError(f"cannot read {path}: {exc} (not a run nsprof saved)") from None


def _saved_validate(text: str):
    """(target, a ValidateResult per shape) when `text` is validate --save's JSON (or an older nsprof's, which
    has its tables and no format), else None."""
    import json

    from nsprof.render.json import VALIDATE_FORMAT

    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None  # load_tune says what is wrong with it
    older = {"agreement", "per_config", "noise_floor", "verdict"}
    if isinstance(document, dict) and (
        document.get("format") == VALIDATE_FORMAT or ("format" not in document and older <= set(document))
    ):
        from nsprof.validate_saved import load_validate

        return load_validate(document)
    return None


def _run_target(store, run_id: int) -> str:
    runs = store.runs()
    return str(runs[runs["id"] == run_id]["target"].fillna(f"run {run_id}").iloc[-1])

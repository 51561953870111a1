"""The report page of `nsprof validate --html` and `nsprof tune --html`: one self-contained HTML file.

Everything is inside the file: the tables as HTML tables, the plots as base64 PNG `data:` images,
the style in a <style> element. It loads nothing (no script, no font, no stylesheet from the
network), so it reads the same offline, attached to a mail or opened from an archive years on.
Without matplotlib the page has its tables and says where the plots were left out.

Cells are worded as in the printed tables (nsprof.render.text): µs with three decimals, "-"
for a missing value.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone

from nsprof import __version__
from nsprof.analysis.agreement import floor_map, wide
from nsprof.analysis.stats import is_missing
from nsprof.render.configs import config_name, constant_line, split_configs
from nsprof.render.text import num, us, yes_no
from nsprof.render.tune_tables import cross_lines, ranked_lines, shapes_lines, tie_cell
from nsprof.render.validate_tables import MATCHED_HEADERS, describe_winners, matched_rows
from nsprof.timers.specs import fast_timer_label

NO_MATPLOTLIB = "plot left out: matplotlib is not installed (pip install 'nsprof[plot]')"

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 80em;
       padding: 0 1em; color: #1a1a1a; background: #fff; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
.scroll { max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f0f0f0; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.tied td { background: #fdecea; }
img { max-width: 100%; border: 1px solid #eee; }
.meta, .note { color: #555; } .error { color: #b00020; }
pre { background: #f7f7f7; padding: 0.6em; white-space: pre-wrap; }
"""


def esc(value) -> str:
    """Text for an element's content (quotes need no escaping there)."""
    return html.escape(str(value), quote=False)


def attr(value) -> str:
    """Text for an attribute's value in double quotes."""
    return html.escape(str(value), quote=True)


def table_html(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    numeric: Iterable[int] = (),
    table_id: str | None = None,
    row_classes: Sequence[str] | None = None,
) -> str:
    """An HTML table of text cells (escaped); columns in `numeric` are right-aligned."""
    numeric = set(numeric)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        cls = row_classes[index] if row_classes is not None and row_classes[index] else ""
        cells = "".join(
            f'<td class="n">{esc(c)}</td>' if i in numeric else f"<td>{esc(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    ident = f' id="{attr(table_id)}"' if table_id else ""
    # in a box of the page's width that scrolls sideways: a wide table never widens the page
    return (
        f'<div class="scroll"><table{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def image_html(png: bytes, alt: str, image_id: str | None = None) -> str:
    """A PNG as an <img> with a base64 data: URI (nothing to fetch)."""
    ident = f' id="{attr(image_id)}"' if image_id else ""
    return (
        f'<img{ident} alt="{attr(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
    )


def figure_html(make_figure: Callable[[], object], alt: str, image_id: str) -> str:
    """The figure `make_figure()` returns, embedded; a note instead when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f'<p class="note">{esc(NO_MATPLOTLIB)}</p>'
    from nsprof.render.plot import png_bytes

    return image_html(png_bytes(make_figure()), alt, image_id)


def page(title: str, body: Sequence[str]) -> str:
    """A whole HTML document: `body` parts (HTML) under a heading, with the style inline."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1>",
            f'<p class="meta">written by nsprof {esc(__version__)} on {when}</p>',
            *body,
            "</body></html>",
            "",
        ]
    )


def _lines(items: Iterable[str], cls: str) -> str:
    items = list(items)
    return "<ul>" + "".join(f'<li class="{cls}">{esc(i)}</li>' for i in items) + "</ul>" if items else ""


def _int(value) -> str:
    return "-" if is_missing(value) else str(int(value))


# --------------------------------------------------------------------------- nsprof validate


def per_config_table(per_config, configs=None) -> str:
    """Configs as rows, methods as columns, µs (format_per_config's cells)."""
    table = wide(per_config, None)
    headers = ["id"] + (["config"] if configs is not None else []) + [f"{m} µs" for m in table.columns]
    rows = []
    for cid, values in table.iterrows():
        rows.append(
            [str(cid)]
            + ([config_name(configs, cid)] if configs is not None else [])
            + [us(None if is_missing(v) else v) for v in values]
        )
    first = 2 if configs is not None else 1
    return table_html(headers, rows, numeric={0, *range(first, len(headers))}, table_id="per-config")


def agreement_table(agreement_df) -> str:
    k = agreement_df.attrs.get("k", 3)
    headers = [
        "timer",
        "truth",
        "n",
        "bias ×",
        "τ",
        "ρ",
        "same best",
        "regret %",
        f"top-{k}",
        "timer's pick",
        "truth's best",
    ]
    rows = []
    for r in agreement_df.to_dict("records"):
        rows.append(
            [
                str(r["timer"]),
                str(r["truth"]),
                str(r["n"]),
                num(r["bias"], ".3f"),
                num(r["kendall_tau"], ".3f"),
                num(r["spearman_rho"], ".3f"),
                yes_no(r["same_best"]),
                num(None if is_missing(r["regret"]) else r["regret"] * 100, ".1f"),
                yes_no(r.get("top_k_hit")),
                _int(r.get("timer_pick")),
                _int(r.get("truth_best")),
            ]
        )
    return table_html(headers, rows, numeric=set(range(2, len(headers))) - {6, 8}, table_id="agreement")


def floor_table(floors) -> str:
    """Each ground truth's own repeatability (or its direct-vs-graph agreement)."""
    if floors is None or isinstance(floors, Mapping):
        rows = [[t, num(tau, ".3f")] for t, tau in floor_map(floors).items()]
        return table_html(["truth", "τ"], rows, numeric={1}, table_id="noise-floor") if rows else ""
    stability = "winners" in floors
    headers = ["truth", "against", "n", "τ", "median change %", "max change %"] + (
        ["winners"] if stability else []
    )
    rows = []
    for r in floors.to_dict("records"):
        rows.append(
            [
                str(r.get("truth")),
                str(r.get("against", "-")),
                str(r.get("n", "-")),
                num(r.get("kendall_tau"), ".3f"),
                num(None if is_missing(r.get("median_rel_change")) else r["median_rel_change"] * 100, ".1f"),
                num(None if is_missing(r.get("max_rel_change")) else r["max_rel_change"] * 100, ".1f"),
            ]
            + ([describe_winners(r)] if stability else [])
        )
    return table_html(headers, rows, numeric={2, 3, 4, 5}, table_id="noise-floor")


def matched_table(matched) -> str:
    """Each timer against the truth under its own conditions beside that truth's floor, and
    against the unmatched truth (format_matched's cells)."""
    if matched is None or not len(matched):
        return ""
    headers, rows = list(MATCHED_HEADERS), matched_rows(matched)
    return table_html(headers, rows, numeric={4, 5, 8, 9}, table_id="matched")


def conditions_table(conditions) -> str:
    rows = [[str(m), str(words)] for m, words in (conditions or {}).items()]
    return (
        table_html(["method", "how it was taken"], rows, numeric=set(), table_id="conditions") if rows else ""
    )


def validate_page(result, title: str = "nsprof validate") -> str:
    """The page of a validate run (`result`: an nsprof.validate.ValidateResult): verdict, agreement,
    the ground truths' floors, the agreement plot, the per-config values, the failures."""
    from nsprof.render.plot import agreement_figure
    from nsprof.render.validate_tables import format_l2_check

    body = [
        "<h2>Verdict</h2>",
        f'<pre id="verdict">{esc(result.verdict)}</pre>',
        "<h2>Agreement of each fast timer with each ground truth</h2>",
        agreement_table(result.agreement),
    ]
    floors = floor_table(result.floors)
    if floors:
        body += ["<h2>Ground truths' own repeatability (noise floor) and winner stability</h2>", floors]
    matched = matched_table(getattr(result, "matched", None))
    if matched:
        body += [
            "<h2>Matched conditions: each timer against ncu under its own clocks and L2 state</h2>",
            matched,
        ]
    conditions = conditions_table(getattr(result, "conditions", None))
    if conditions:
        body += ["<h2>How each number was taken</h2>", conditions]
    l2 = format_l2_check(getattr(result, "l2_check", None), result.timers)
    if l2:  # whether "cold" was cold: the timers claiming it, checked under ncu
        body += ["<h2>L2 check of the cold timers</h2>", f'<pre id="l2-check">{esc(l2)}</pre>']
    body += [
        "<h2>Agreement plot</h2>",
        figure_html(
            lambda: agreement_figure(
                result.per_config, result.agreement, result.timers, result.truths, floors=result.floors
            ),
            "agreement plot",
            "agreement-plot",
        ),
        "<h2>Per config (µs)</h2>",
        per_config_table(result.per_config, result.configs),
    ]
    failures = [
        f"{method} failed on config {config_id}: {reason}"
        for (method, config_id), reason in sorted((result.failures or {}).items(), key=str)
    ]
    if failures:
        body += ["<h2>Failures</h2>", _lines(failures, "error")]
    return page(title, body)


# --------------------------------------------------------------------------- nsprof tune


def ranked_table(table, table_id: str = "ranked", tie: bool | None = None, configs=None) -> str:
    """tune's ranked table; interval columns and the tie column when the table has them, its
    cells as the terminal's (render.tune_tables.tie_cell; with the space's `configs`, a config by
    the keys that vary, render.configs). `tie`: whether the decision is a tie (None: decided here
    from the table)."""
    from nsprof.render.configs import config_cell, config_of, split_configs

    varying = split_configs(configs)[1] if configs is not None else None
    has_ci = "ci_low_ns" in table and "ci_high_ns" in table
    has_tie = "tied_with_best" in table
    if tie is None:
        from nsprof.analysis.confidence import decide

        tie = has_ci and has_tie and decide(table).kind == "tie"
    headers = (
        ["rank", "id", "config", "µs"] + (["interval µs"] if has_ci else []) + (["tie"] if has_tie else [])
    )
    headers += ["spread %", "cycles", "clock GHz", "vs best", "error"]
    rows, classes = [], []
    for r in table.to_dict("records"):
        row = [
            "-" if is_missing(r.get("rank")) else str(int(r["rank"])),
            str(int(r["config_id"])),
            config_cell(config_of(configs, r["config_id"]), r.get("config"), varying),
            us(r.get("value_ns")),
        ]
        if has_ci:
            row.append(
                "-"
                if is_missing(r.get("ci_low_ns")) or is_missing(r.get("ci_high_ns"))
                else f"{us(r['ci_low_ns'])} – {us(r['ci_high_ns'])}"
            )
        cell = tie_cell(tie, r.get("tied_with_best")) if has_tie else ""
        if has_tie:
            row.append(cell)
        spread, clock = r.get("spread"), r.get("median_clock_hz")
        row += [
            num(None if is_missing(spread) else spread * 100, ".1f"),
            num(r.get("median_cycles"), ",.0f"),
            num(None if is_missing(clock) else clock / 1e9, ".3f"),
            "-" if is_missing(r.get("vs_best")) else f"+{r['vs_best'] * 100:.1f}%",
            "-" if is_missing(r.get("error")) else str(r["error"]),
        ]
        rows.append(row)
        classes.append("tied" if cell else "")
    numeric = {i for i, h in enumerate(headers) if h not in ("config", "tie", "error")}
    return table_html(headers, rows, numeric=numeric, table_id=table_id, row_classes=classes)


def _ranking_html(result, configs, suffix: str = "") -> list[str]:
    """One ranking's part of the tune page: the lines the terminal prints under its table
    (render.tune_tables.ranked_lines), its plot and its table."""
    from nsprof.render.tune_plot import tune_figure

    return [
        f'<p id="label{suffix}">ranked by {esc(result.label)}</p>',
        _decision_lines(ranked_lines(result, configs), f"decision{suffix}"),
        "<h3>Ranking plot</h3>",
        figure_html(
            lambda: tune_figure(result.table, f"ranked by {result.label}", configs),
            "ranking plot",
            f"ranking-plot{suffix}",
        ),
        "<h3>Ranked configs</h3>",
        _lines(constant_line(split_configs(configs)[0]) if configs is not None else [], "note"),
        ranked_table(result.table, f"ranked{suffix}", tie=result.decision.kind == "tie", configs=configs),
    ]


def _decision_lines(lines: Sequence[str], list_id: str) -> str:
    """The terminal's lines about a decision, worded as it words them, "best:" in bold."""
    items = "".join(
        f"<li><b>{esc(line)}</b></li>" if line.startswith("best:") else f'<li class="note">{esc(line)}</li>'
        for line in lines
    )
    return f'<ul id="{attr(list_id)}">{items}</ul>' if items else ""


def tune_page(report, title: str = "nsprof tune") -> str:
    """The page of a tune run (`report`: an nsprof.analysis.tune_report.TuneReport): each truth's
    ranking (its decision, interval and notes as the terminal prints them, the plot, the table), how
    the truths' winners compare and the verdict, the prescreen's table, and errors. A target with
    shapes: the first shape's ranking and the per-shape lines."""
    body = [_lines(report.errors, "error")]
    first, configs = report.shapes[0], report.configs
    if report.shaped:
        body += ["<h2>Per shape</h2>", _decision_lines(shapes_lines(report), "shapes")]
        body += [f"<h2>Shape {first.shape}</h2>", *_ranking_html(first.ranking, configs)]
    elif len(first.truths) == 1:
        body += _ranking_html(first.ranking, configs)
    else:
        for i, (truth, ranked) in enumerate(first.truths.items()):
            body += [
                f"<h2>Under {esc(truth)}</h2>",
                *_ranking_html(ranked, configs, "" if i == 0 else f"-{i}"),
            ]
        body += ["<h2>Across the truths</h2>", _decision_lines(cross_lines(first), "cross-truth")]
    if first.prescreen is not None:
        taken = report.settings  # the prescreen's timer, as the tune recorded it
        label = fast_timer_label(str(taken.get("prescreen")), str(taken.get("stat")), taken.get("timer_reps"))
        body += ["<h2>Prescreen</h2>", f"<p>{esc(label)}</p>", ranked_table(first.prescreen, "prescreen")]
    return page(title, body)


def write_page(text: str, path) -> None:
    """Write a page (UTF-8), making its folder ("-": standard output)."""
    import sys
    from pathlib import Path

    from nsprof.host.owned import written_over

    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with written_over(Path(path)) as out:
        out.write(text.encode("utf-8"))

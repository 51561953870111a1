"""Cross-truth tuning: `tune --truth A,B` ranks under each truth, says whether the winners
agree, by how much they differ, which condition explains it, and feeds back the --deploy truth's.

Two stand-in truths are registered (tests/standins.py's StatusDriver, run in real worker processes):
"lab" labels its rows as ncu does and honours clock and cache control; "field" labels them as nsys
does (the card's own clocks, warm L2). Each config's "ns_at" says what it takes under each
"<clock>-<cache>" condition, so every winner, percentage and explanation is known in advance and
computed here from those numbers, independently of nsprof.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_nsprof

sys.path.insert(0, str(Path(__file__).parent))

from standins import StatusDriver  # noqa: E402

from nsprof.analysis import crosstruth  # noqa: E402
from nsprof.drivers import registry  # noqa: E402
from nsprof.drivers.ncu import NcuDriver  # noqa: E402
from nsprof.drivers.nsys import NsysDriver  # noqa: E402
from nsprof.errors import NsprofError  # noqa: E402
from nsprof.settings import TuneSettings  # noqa: E402

# Under "base-all" (lab / ncu: clocks locked, caches flushed) config 0 wins; under "none-none"
# (field / nsys, and lab with both changed) config 1 does. With warm L2 alone ("base-none") the
# lab already picks 1; with free clocks alone ("none-all") it still picks 0: the L2 state explains it.
L2_EXPLAINS = {
    0: {"base-all": 1000, "base-none": 900, "none-all": 700, "none-none": 640},
    1: {"base-all": 1100, "base-none": 800, "none-all": 760, "none-none": 560},
    2: {"base-all": 1300, "base-none": 1200, "none-all": 900, "none-none": 850},
}
# Here the clocks explain it: free clocks alone flip the lab's pick, warm L2 alone does not.
CLOCKS_EXPLAIN = {
    0: {"base-all": 1000, "base-none": 950, "none-all": 800, "none-none": 700},
    1: {"base-all": 1100, "base-none": 1050, "none-all": 750, "none-none": 600},
    2: {"base-all": 1300, "base-none": 1200, "none-all": 900, "none-none": 850},
}
# Both truths pick config 0.
AGREE = {0: {"base-all": 900, "none-none": 500}, 1: {"base-all": 1000, "none-none": 600}}
# The lab picks 1; the field measures 0 and 1 alike (a tie, fed back by the lower id: 0): a
# one-sided tie, as ncu and nsys on the H200's 512³ Triton matmul, so they disagree.
ONE_SIDED = {
    0: {"base-all": 1000, "none-none": 500},
    1: {"base-all": 900, "none-none": 500},
    2: {"base-all": 1200, "none-none": 700},
}

TARGET = textwrap.dedent("""
    import json, os
    from nsprof.space import Space
    from nsprof.tuner import TunerHook

    NS_AT = {ns_at!r}

    class Hook(TunerHook):
        name = "the stand-in tuner"

        def feed_back(self, latencies_ms):
            # A fresh child process (nsprof.feedback.tuner_in_child): what it was handed goes to a file.
            with open(os.environ["FEED_FILE"], "w") as out:
                json.dump({{str(k): v for k, v in latencies_ms.items()}}, out)
            best = min(latencies_ms, key=latencies_ms.get)
            return f"stored config {{best}}"

    configs = [{{"ns_at": {{k: float(v) for k, v in NS_AT[c].items()}}}} for c in sorted(NS_AT)]
    space = Space(name="truths", configs=configs, build=lambda c: (lambda: None), device="cpu", tuner=Hook())
""")


def lab_ns(table, condition):
    return {c: float(at[condition]) for c, at in table.items()}


def best_of(values):
    return min(values, key=lambda c: (values[c], c))


def pct_slower(values, config, best):
    return (values[config] / values[best] - 1) * 100


@pytest.fixture
def truths(tmp_path, monkeypatch):
    lab = type("Lab", (StatusDriver,), {"labels_like": NcuDriver})
    field = type("Field", (StatusDriver,), {"labels_like": NsysDriver})
    registry.register("lab", lab)
    registry.register("field", field)
    monkeypatch.setenv("NSPROF_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("FEED_FILE", str(tmp_path / "fed.json"))

    def target(ns_at, name="truths_target"):
        path = tmp_path / f"{name}.py"
        path.write_text(TARGET.format(ns_at=ns_at))
        return f"{path}:space"

    yield target
    registry.unregister("lab")
    registry.unregister("field")


def settings(tmp_path, **kwargs):
    base = {
        "mode": "direct",
        "reps": 3,
        "timeout_s": 60,
        "store": tmp_path / "r.sqlite",
        "work_dir": tmp_path / "wd",
        "tuner_pick": False,
    }
    return TuneSettings(**{**base, **kwargs})


def test_disagreeing_truths_say_by_how_much_and_the_l2_state_explains_it(truths, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    result = tune(truths(L2_EXPLAINS), settings(tmp_path, truths=("lab", "field")))
    lab, field = lab_ns(L2_EXPLAINS, "base-all"), lab_ns(L2_EXPLAINS, "none-none")
    lab_best, field_best = best_of(lab), best_of(field)
    assert (lab_best, field_best) == (0, 1)
    assert list(result.shapes[0].truths) == ["lab", "field"]
    assert (
        result.shapes[0].deploy == "lab" and result.ranking.best_config_id == lab_best
    )  # the first truth by default
    assert result.shapes[0].truths["field"].best_config_id == field_best
    (pair,) = result.shapes[0].cross.pairs
    assert pair.verdict == "disagree"
    assert pair.a_under_b * 100 == pytest.approx(pct_slower(field, lab_best, field_best))
    assert pair.b_under_a * 100 == pytest.approx(pct_slower(lab, field_best, lab_best))

    (explanation,) = result.shapes[0].cross.explanations
    assert explanation.probed.name == "lab" and explanation.target == "field"
    assert explanation.contenders == [0, 1]  # both winners (no ties here); config 2 is not measured again
    probes = {p.truth: p for p in explanation.probes}
    assert set(probes) == {"lab@base-warm", "lab@free-cold", "lab@free-warm"}
    assert (
        probes["lab@base-warm"].winner
        == best_of({c: lab_ns(L2_EXPLAINS, "base-none")[c] for c in (0, 1)})
        == 1
    )
    assert (
        probes["lab@free-cold"].winner
        == best_of({c: lab_ns(L2_EXPLAINS, "none-all")[c] for c in (0, 1)})
        == 0
    )
    assert probes["lab@free-warm"].winner == 1
    assert sorted(int(c) for c in probes["lab@base-warm"].table["config_id"]) == [0, 1]
    assert explanation.cause == "cache_control"

    text = format_tune(result)
    a_pct = f"{pct_slower(field, lab_best, field_best):+.1f}%"
    b_pct = f"{pct_slower(lab, field_best, lab_best):+.1f}%"
    assert f"lab's winner is {a_pct} under field, field's winner {b_pct} under lab" in text
    assert "with warm L2 (lab@base-warm) it picks config 1, field's winner" in text
    assert "with the card's own clocks (lab@free-cold) it picks config 0, not field's 1" in text
    last = text.splitlines()[-1]
    assert last.startswith("verdict: lab and field disagree") and "the L2 state explains it" in last
    assert "deploy lab (cold L2 (caches flushed), clocks locked to base, direct launches)" in last
    assert text.count("ranked by ") == 2  # one table per truth

    # The deploy truth's ranking is what the tuner got (in its own process), and the note says so.
    fed = json.loads((tmp_path / "fed.json").read_text())
    assert {int(c): v for c, v in fed.items()} == pytest.approx({c: v / 1e6 for c, v in lab.items()})
    assert any(
        note.startswith("handed to the stand-in tuner for deploy condition lab (cold L2")
        and note.endswith(f"stored config {lab_best}")
        for note in result.ranking.notes
    )


def test_when_the_clocks_explain_it_the_verdict_says_the_clocks(truths, tmp_path):
    from nsprof.tune import tune

    result = tune(truths(CLOCKS_EXPLAIN), settings(tmp_path, truths=("lab", "field"), feed_back=False))
    (explanation,) = result.shapes[0].cross.explanations
    probes = {p.truth: p.winner for p in explanation.probes}
    warm = lab_ns(CLOCKS_EXPLAIN, "base-none")
    free = lab_ns(CLOCKS_EXPLAIN, "none-all")
    assert probes == {
        "lab@base-warm": best_of({c: warm[c] for c in (0, 1)}),
        "lab@free-cold": best_of({c: free[c] for c in (0, 1)}),
        "lab@free-warm": 1,
    }
    assert probes["lab@base-warm"] == 0 and probes["lab@free-cold"] == 1
    assert explanation.cause == "clock_control"


# Only the two conditions together flip the lab's pick: the lab at free clocks and warm L2 is the other truth.
BOTH_EXPLAIN = {
    0: {"base-all": 1000, "base-none": 1000, "none-all": 1000, "none-none": 640},
    1: {"base-all": 1100, "base-none": 1100, "none-all": 1100, "none-none": 560},
}


def test_two_truths_of_one_tool_apart_in_both_conditions_are_explained_by_both(truths, tmp_path):
    """The probe with every condition changed is the other truth itself: not measured again (nor listed as a
    probe), and its pick counts (it was left out, and the cause read "neither")."""
    from nsprof.tune import tune

    result = tune(truths(BOTH_EXPLAIN), settings(tmp_path, truths=("lab", "lab@free-warm"), feed_back=False))
    (explanation,) = result.shapes[0].cross.explanations
    probes = {p.truth: p.winner for p in explanation.probes}
    warm, free = lab_ns(BOTH_EXPLAIN, "base-none"), lab_ns(BOTH_EXPLAIN, "none-all")
    assert probes == {"lab@base-warm": best_of(warm), "lab@free-cold": best_of(free)}
    assert explanation.cause == "both"


def test_agreeing_truths_are_said_so_and_a_one_sided_tie_is_a_disagreement(truths, tmp_path):
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    agreed = tune(truths(AGREE, "agree_target"), settings(tmp_path, truths=("lab", "field"), feed_back=False))
    assert [p.verdict for p in agreed.shapes[0].cross.pairs] == ["agree"] and agreed.shapes[
        0
    ].cross.explanations == []
    assert format_tune(agreed).splitlines()[-1].startswith("verdict: lab and field agree on config 0")

    one_sided = tune(
        truths(ONE_SIDED, "one_sided_target"),
        settings(tmp_path / "t", truths=("lab", "field"), feed_back=False),
    )
    (pair,) = one_sided.shapes[0].cross.pairs
    lab, field = lab_ns(ONE_SIDED, "base-all"), lab_ns(ONE_SIDED, "none-none")
    assert pair.winner_a == best_of(lab) == 1
    assert pair.winner_b == best_of(field) == 0 and pair.ties_b == [0, 1] and pair.ties_a == [1]
    # field cannot tell 1 from 0, but lab can: not a tie of the two truths
    assert pair.verdict == "disagree" and len(one_sided.shapes[0].cross.explanations) == 1
    assert pair.b_under_a == pytest.approx(pct_slower(lab, 0, 1) / 100)
    text = format_tune(one_sided)
    assert "lab's winner is tied for best under field, so it is the safe pick under both" in text
    assert "field's winner is tied for best" not in text


def test_deploy_picks_what_is_fed_back_and_the_store_records_it(truths, tmp_path):
    from nsprof.tune import tune

    result = tune(truths(L2_EXPLAINS), settings(tmp_path, truths=("lab", "field"), deploy="field"))
    field = lab_ns(L2_EXPLAINS, "none-none")
    assert (
        result.shapes[0].deploy == "field"
        and result.ranking.truth == "field"
        and result.ranking.best_config_id == best_of(field)
    )
    fed = json.loads((tmp_path / "fed.json").read_text())
    assert {int(c): v for c, v in fed.items()} == pytest.approx({c: v / 1e6 for c, v in field.items()})
    assert any(
        "for deploy condition field (warm L2, the card's own clocks, direct launches)" in n
        for n in result.ranking.notes
    )

    db = sqlite3.connect(tmp_path / "r.sqlite")
    runs = db.execute(
        "SELECT backend, clock_control, cache_control, settings_json FROM runs ORDER BY id"
    ).fetchall()
    assert [(b, clock, cache) for b, clock, cache, _ in runs] == [
        ("lab", "base", "all"),
        ("field", "none", "none"),  # the two truths, every config
        ("lab", "base", "none"),
        ("lab", "none", "all"),
        ("lab", "none", "none"),
    ]  # the probes
    for *_, settings_json in runs:
        recorded = json.loads(settings_json)
        assert recorded["deploy"] == "field" and recorded["truths"] == ["lab", "field"]
    probed = db.execute(
        "SELECT DISTINCT config_id FROM measurements WHERE backend = 'lab' AND "
        "cache_control = 'none' ORDER BY config_id"
    ).fetchall()
    assert probed == [(0,), (1,)]  # only the contenders were measured again
    warm = dict(
        db.execute(
            "SELECT config_id, duration_ns FROM measurements WHERE backend = 'lab' AND "
            "clock_control = 'base' AND cache_control = 'none'"
        ).fetchall()
    )
    assert warm == {c: lab_ns(L2_EXPLAINS, "base-none")[c] for c in (0, 1)}
    db.close()


def test_truth_and_deploy_values_are_checked(truths, tmp_path):
    from nsprof.settings import Truth

    for kwargs, message in [
        ({"truths": ("lab", "graph")}, "graph is a fast timer: use --backend graph"),
        ({"truths": ("lab", "perf")}, "unknown truth 'perf'"),
        ({"truths": ("lab", "lab")}, "names a truth twice"),
        ({"truths": ("lab",), "deploy": "field"}, "--deploy field is not one of the truths ranked (lab)"),
        ({"truths": ("lab",), "deploy": "perf"}, "unknown truth 'perf'"),
        ({"backend": "cupti", "deploy": "lab"}, "needs ground truths"),
    ]:
        with pytest.raises(NsprofError, match=message.replace("(", r"\(").replace(")", r"\)")):
            TuneSettings(**kwargs)
    for condition in ("base-warm", "base-cold", "free-warm"):  # its defaults named are a condition too
        with pytest.raises(NsprofError, match="field cannot set clocks or caches, so it takes no condition"):
            TuneSettings(truths=("lab", f"field@{condition}"))
    assert TuneSettings(truths=("lab@free-warm", "field")).truths[0] == Truth("lab", "free", "warm")
    one = TuneSettings(backend="field")
    assert (one.ranked_truths, one.deploy_truth, one.truths) == ((Truth("field"),), Truth("field"), ())
    two = TuneSettings(truths=("lab@base-cold", "field"), deploy="field")  # parsed once, here
    assert two.truths == (Truth("lab"), Truth("field")) and two.deploy == Truth("field")


def test_verdict_and_cause_rules():
    assert crosstruth.verdict(1, [1], 1, [1, 2]) == "agree"
    assert crosstruth.verdict(1, [1, 2], 2, [2, 1]) == "tied"  # each inside the other's tie set
    assert crosstruth.verdict(1, [1], 2, [2, 1]) == "disagree"  # only one truth cannot tell them apart
    assert crosstruth.verdict(1, [1, 2], 2, [2]) == "disagree"
    assert crosstruth.verdict(1, [1], 2, [2, 3]) == "disagree"
    assert crosstruth.verdict(None, [], 2, [2]) == "unknown"

    def probe(changed, verdict):
        return crosstruth.Probe("x", changed, {}, 0, [0], verdict)

    cache, clock, both = ["cache_control"], ["clock_control"], ["cache_control", "clock_control"]
    assert (
        crosstruth.cause([probe(cache, "agree"), probe(clock, "disagree"), probe(both, "agree")])
        == "cache_control"
    )
    assert (
        crosstruth.cause([probe(cache, "disagree"), probe(clock, "tied"), probe(both, "agree")])
        == "clock_control"
    )
    assert crosstruth.cause([probe(cache, "agree"), probe(clock, "agree"), probe(both, "agree")]) == "either"
    assert (
        crosstruth.cause([probe(cache, "disagree"), probe(clock, "disagree"), probe(both, "agree")]) == "both"
    )
    assert (
        crosstruth.cause([probe(cache, "disagree"), probe(clock, "disagree"), probe(both, "disagree")])
        == "neither"
    )
    assert crosstruth.cause([probe(cache, "unknown")]) == "not measured"
    # A condition whose probe measured nothing (or cannot tell: untested) might explain it alone: neither
    # "both" nor "neither" can be said then.
    for unknown in ("unknown", "untested"):
        assert crosstruth.cause([probe(cache, unknown), probe(clock, "disagree"), probe(both, "agree")]) == (
            "not measured"
        )
        assert crosstruth.cause(
            [probe(cache, "disagree"), probe(clock, unknown), probe(both, "disagree")]
        ) == ("not measured")
    assert crosstruth.cause([probe(cache, "unknown"), probe(clock, "agree"), probe(both, "agree")]) == (
        "clock_control"
    )
    # the change that is the other truth itself (not measured again) explains it, alone or with the other
    assert crosstruth.cause([], other=cache) == "cache_control"
    assert crosstruth.cause([probe(cache, "disagree"), probe(clock, "disagree")], other=both) == "both"
    from nsprof.settings import Truth

    assert Truth.parse("ncu@free-warm") == Truth("ncu", "free", "warm") and Truth.parse(
        "ncu@base-cold"
    ) == Truth("ncu")
    assert Truth.of_labels("ncu", {"clock_control": "base", "cache_control": "none"}).name == "ncu@base-warm"


# ----------------------------------------------------------------------------- the command line


def _cli(tmp_path, *args, ns_at=L2_EXPLAINS):
    """nsprof's CLI in this process with the stand-ins as ncu and nsys (their workers and the tuner's
    child in child processes)."""
    (tmp_path / "t.py").write_text(TARGET.format(ns_at=ns_at))
    env = {"NSPROF_LOCK_DIR": str(tmp_path), "FEED_FILE": str(tmp_path / "fed.json")}
    return run_nsprof(*args, cwd=tmp_path, env=env, standins=True, in_process=True)


def test_the_cli_ranks_under_ncu_and_nsys_and_records_the_deploy(tmp_path):
    """tests/standins.py stands in for ncu and nsys (their row labels, here in child processes)."""
    done = _cli(
        tmp_path,
        "tune",
        "t.py:space",
        "--truth",
        "ncu,nsys",
        "--deploy",
        "nsys",
        "--mode",
        "direct",
        "--reps",
        "3",
        "--store",
        "r.sqlite",
        "--work-dir",
        "wd",
        "--no-tuner-pick",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    ncu, nsys = lab_ns(L2_EXPLAINS, "base-all"), lab_ns(L2_EXPLAINS, "none-none")
    assert [t["truth"] for t in doc["truths"]] == ["ncu", "nsys"]
    assert [t["best_config_id"] for t in doc["truths"]] == [best_of(ncu), best_of(nsys)]
    assert doc["deploy"]["truth"] == "nsys" and doc["best_config_id"] == best_of(nsys)
    assert doc["deploy"]["conditions"] == "warm L2, the card's own clocks, direct launches"
    (pair,) = doc["agreement"]
    assert pair["verdict"] == "disagree"
    assert pair["a_under_b"] * 100 == pytest.approx(pct_slower(nsys, best_of(ncu), best_of(nsys)))
    assert pair["b_under_a"] * 100 == pytest.approx(pct_slower(ncu, best_of(nsys), best_of(ncu)))
    (explanation,) = doc["explanations"]
    assert explanation["cause"] == "cache_control" and explanation["words"] == "the L2 state explains it"
    assert {p["truth"]: p["winner"] for p in explanation["probes"]} == {
        "ncu@base-warm": 1,
        "ncu@free-cold": 0,
        "ncu@free-warm": 1,
    }
    assert "the L2 state explains it" in doc["verdict"]
    fed = json.loads((tmp_path / "fed.json").read_text())
    assert best_of({int(c): v for c, v in fed.items()}) == best_of(nsys)

    listed = _cli(tmp_path, "results", "--store", "r.sqlite")
    assert listed.returncode == 0, listed.stderr
    header, _, *rows = listed.stdout.splitlines()
    assert header.split()[-1] == "deploy"
    assert len(rows) == 5 and all(row.split()[-1] == "nsys" for row in rows)


def test_the_cli_prints_one_table_per_truth_and_a_closing_verdict(tmp_path):
    done = _cli(
        tmp_path,
        "tune",
        "t.py:space",
        "--truth",
        "ncu,nsys",
        "--mode",
        "direct",
        "--reps",
        "3",
        "--no-store",
        "--work-dir",
        "wd",
        "--no-tuner-pick",
        "--no-explain",
        ns_at=AGREE,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("ranked by ncu") for line in lines) == 1
    assert sum(line.startswith("ranked by nsys") for line in lines) == 1
    assert lines[-1] == (
        "verdict: ncu and nsys agree on config 0; deploy ncu (cold L2 (caches flushed), clocks "
        "locked to base, direct launches): its winner, config 0, is the one fed back"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--truth", "ncu,graph"],
            "nsprof: error: --truth takes ground truths (ncu, nsys); graph is a fast timer",
        ),
        (
            ["--truth", "ncu,,nsys"],
            "nsprof: error: Invalid value for --truth: --truth takes one or more names",
        ),
        (["--truth", "ncu,nsys,ncu"], "nsprof: error: Invalid value for --truth: names ncu more than once"),
        (
            ["--truth", "nsys@base-warm"],
            "nsprof: error: truth 'nsys@base-warm': nsys cannot set clocks or caches, so it takes no "
            "condition: give plain nsys",
        ),
        (
            ["--truth", "ncu,nsys@base-cold"],
            "nsprof: error: truth 'nsys@base-cold': nsys cannot set clocks or caches, so it takes no "
            "condition: give plain nsys (a condition @CLOCK-L2 is for ncu)",
        ),
        (
            ["--truth", "ncu,nsys", "--deploy", "nsys@base-cold"],
            "nsprof: error: truth 'nsys@base-cold': nsys cannot set clocks or caches",
        ),
        (
            ["--truth", "ncu,nsys", "--deploy", "ncu@base-warm"],
            "nsprof: error: --deploy ncu@base-warm is not one of the truths",
        ),
        (["--deploy", "nsys"], "nsprof: error: --deploy nsys is not one of the truths ranked (ncu)"),
        (
            ["--backend", "nsys", "--truth", "ncu,nsys"],
            "nsprof: error: --backend nsys and --truth ncu,nsys contradict",
        ),
        (["--backend", "cupti", "--deploy", "ncu"], "nsprof: error: --deploy ncu needs ground truths"),
    ],
)
def test_bad_truth_and_deploy_values_are_one_line(tmp_path, args, message):
    done = _cli(tmp_path, "tune", "t.py:space", "--no-store", *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith(message), (
        done.stderr
    )
    assert not (tmp_path / "fed.json").exists()


def test_a_backend_and_a_truth_naming_the_same_condition_do_not_contradict(tmp_path):
    """Plain ncu is ncu@base-cold (nsprof's defaults): --backend ncu beside --truth ncu@base-cold says the same."""
    done = _cli(tmp_path, "tune", "t.py:space", "--no-store", "--backend", "ncu", "--truth", "ncu@base-cold",
                "--mode", "direct", "--budget-s", "0", "--no-explain")  # fmt: skip
    assert done.returncode == 0 and "contradict" not in done.stderr, done.stderr
    assert done.stdout.startswith("ranked by ncu, mode direct"), done.stdout


def test_a_probe_far_above_the_other_truth_is_flagged(truths, tmp_path):
    """On the H200, ncu with free clocks once read µs kernels 35-80x too long; such a probe is flagged."""
    from nsprof.render.tune_tables import format_tune
    from nsprof.tune import tune

    erratic = {c: {**at, "none-all": at["none-all"] * 50} for c, at in L2_EXPLAINS.items()}
    result = tune(
        truths(erratic, "erratic_target"), settings(tmp_path, truths=("lab", "field"), feed_back=False)
    )
    (explanation,) = result.shapes[0].cross.explanations
    free, field = lab_ns(erratic, "none-all"), lab_ns(erratic, "none-none")
    ratio = sorted(free[c] / field[c] for c in (0, 1))
    expected = (ratio[0] + ratio[1]) / 2  # the median of two
    assert explanation.warnings == [
        f"lab@free-cold measured the contenders {expected:.1f}x as long as field did: its "
        "numbers look erratic on this machine, so its pick says little"
    ]
    assert explanation.cause == "cache_control"  # the erratic probe is the one that did not flip
    assert "(warning: lab@free-cold measured" in format_tune(result)


def test_results_reads_runs_recorded_before_the_deploy_field(tmp_path):
    """A store written before cross-truth tuning (no "deploy" in a run's settings, or no settings) still
    lists, with an empty deploy cell; the schema is unchanged."""
    from nsprof.render.run_tables import format_runs
    from nsprof.store import SCHEMA_VERSION, ResultStore

    with ResultStore(tmp_path / "r.sqlite") as store:
        store.start_run(target="old.py:space", backend="ncu", mode="graph", settings={"backend": "ncu"})
        store.start_run(target="bare.py:space", backend="nsys", mode="graph")
        store.start_run(
            target="new.py:space",
            backend="nsys",
            mode="graph",
            settings=TuneSettings(truths=("ncu", "nsys"), deploy="nsys").record(),  # as tune records it
        )
        runs = store.runs()
    assert SCHEMA_VERSION == 2  # made 2 by failure kinds: the deploy field needed no change
    rows = format_runs(runs, {}).splitlines()[2:]
    assert [row.split()[-1] for row in rows] == ["running", "running", "nsys"]


# Three truths: ncu picks 0, nsys 1, ncu@base-warm 2; explaining ncu against nsys probes ncu@base-warm (the third
# truth itself) with the contenders 0 and 1 alone.
THREE_WINNERS = {
    0: {"base-all": 1000, "base-none": 900, "none-all": 700, "none-none": 640},
    1: {"base-all": 1100, "base-none": 800, "none-all": 760, "none-none": 560},
    2: {"base-all": 1300, "base-none": 500, "none-all": 900, "none-none": 850},
}


def test_results_of_a_tune_whose_probes_measured_a_ranked_truth_again_ranks_as_the_tune_did(tmp_path):
    """A probe under a truth the tune also ranks stores the contenders alone: its points are not the tune's."""
    args = ("--truth", "ncu,nsys,ncu@base-warm", "--mode", "direct", "--reps", "3", "--store", "r.sqlite",
            "--work-dir", "wd", "--no-tuner-pick", "--no-feed-back", "--json")  # fmt: skip
    done = _cli(tmp_path, "tune", "t.py:space", *args, ns_at=THREE_WINNERS)
    assert done.returncode == 0, done.stderr
    tuned = {t["truth"]: t["best_config_id"] for t in json.loads(done.stdout)["truths"]}
    assert tuned == {"ncu": 0, "nsys": 1, "ncu@base-warm": 2}
    again = _cli(tmp_path, "results", "r.sqlite", "--target", "t.py:space", "--json", ns_at=THREE_WINNERS)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert {t["truth"]: t["best_config_id"] for t in doc["truths"]} == tuned
    assert [len(t["ranked"]) for t in doc["truths"]] == [3, 3, 3]


def test_results_of_a_resume_that_measured_one_truth_alone_ranks_the_configs_it_asked_under_each(tmp_path):
    """An earlier tune ranked configs 0-2 under ncu; a resume of 0 and 1 under ncu and nsys stores an nsys run
    alone (ncu's points were stored): its re-read ranks 0 and 1 under both, as it did."""
    args = ("--mode", "direct", "--reps", "3", "--store", "r.sqlite", "--work-dir", "wd", "--no-tuner-pick",
            "--no-feed-back", "--budget-s", "0", "--json")  # fmt: skip
    done = _cli(tmp_path, "tune", "t.py:space", "--truth", "ncu", *args, ns_at=THREE_WINNERS)
    assert done.returncode == 0, done.stderr
    done = _cli(tmp_path, "tune", "t.py:space", "--truth", "ncu,nsys", "--configs", "0,1", "--resume", *args,
                ns_at=THREE_WINNERS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    tuned = {
        t["truth"]: sorted(r["config_id"] for r in t["ranked"]) for t in json.loads(done.stdout)["truths"]
    }
    assert tuned == {"ncu": [0, 1], "nsys": [0, 1]}
    again = _cli(tmp_path, "results", "r.sqlite", "--target", "t.py:space", "--json", ns_at=THREE_WINNERS)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert {t["truth"]: sorted(r["config_id"] for r in t["ranked"]) for t in doc["truths"]} == tuned


@pytest.mark.parametrize("truths", ["ncu,nsys", "ncu,nsys,ncu@base-warm"])
def test_results_of_a_resume_whose_only_runs_are_its_explaining_probes_ranks_as_it_did(tmp_path, truths):
    """A tune without --explain, then its --resume with it: every point is stored, so the resume stores its
    probes' runs alone (the contenders 0 and 1), which are no ranking of the tune's: the re-read ranks 0-2 and
    names the winners the resume named."""
    args = ("--truth", truths, "--mode", "direct", "--reps", "3", "--store", "r.sqlite", "--work-dir", "wd",
            "--no-tuner-pick", "--no-feed-back", "--budget-s", "0", "--json")  # fmt: skip
    done = _cli(tmp_path, "tune", "t.py:space", *args, "--no-explain", ns_at=THREE_WINNERS)
    assert done.returncode == 0, done.stderr
    done = _cli(tmp_path, "tune", "t.py:space", *args, "--resume", ns_at=THREE_WINNERS)
    assert done.returncode == 0, done.stderr

    def ranked(doc) -> dict:
        return {
            t["truth"]: (t["best_config_id"], sorted(r["config_id"] for r in t["ranked"]))
            for t in doc["truths"]
        }

    tuned = ranked(json.loads(done.stdout))
    assert all(ids == [0, 1, 2] for _, ids in tuned.values()), tuned
    with sqlite3.connect(tmp_path / "r.sqlite") as db:
        (runs,) = db.execute("SELECT count(*) FROM runs").fetchone()
    assert runs > len(truths.split(",")), "the resume stored its probes' runs"
    again = _cli(tmp_path, "results", "r.sqlite", "--target", "t.py:space", "--json", ns_at=THREE_WINNERS)
    assert again.returncode == 0, again.stderr
    assert ranked(json.loads(again.stdout)) == tuned

"""Winner stability beside each truth's noise floor, on recorded H200 runs.

tests/fixtures/profile_ncu.csv and profile_nsys.csv are real `nsprof profile` runs of the seed
GEMM space (5 reps per config and mode). Two "runs" of a truth are taken from them: the direct
and the graph mode of one run (validate's floor without --repeat), or the whole run against the
same run's reps 0, 1 and 3 and against its reps 2 and 4. What each case must say is computed
here from the reps alone: the median, the interval as the reps' [min, max] (what a 95%
order-statistic interval is with 5 or fewer reps), the tie set as every config whose
[min, max] overlaps the winner's (touching ends included), the winner the lowest median, then
the lower config id.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from nsprof.analysis.agreement import agreement, mode_floor, noise_floor, winner_stability
from nsprof.render.json import agreement_record, validate_document
from nsprof.render.validate_tables import format_agreement, format_floors
from nsprof.schema import make_frame
from nsprof.settings import Truth
from nsprof.validate import truth_rows

FIXTURES = Path(__file__).parent / "fixtures"


def recorded(name: str, reps=None, modes=("direct", "graph")) -> pd.DataFrame:
    frame = pd.read_csv(FIXTURES / name)
    frame = frame[frame["mode"].isin(modes) | frame["error"].notna()]
    if reps is not None:
        frame = frame[frame["rep"].isin(reps) | frame["error"].notna()]
    return make_frame(frame.to_dict("records"))


def expected_pick(name: str, mode: str, reps=None) -> tuple[int, list[int]]:
    """(winner, tie set) from the reps themselves, without nsprof."""
    frame = pd.read_csv(FIXTURES / name)
    frame = frame[frame["error"].isna() & (frame["mode"] == mode)]
    if reps is not None:
        frame = frame[frame["rep"].isin(reps)]
    per_rep = frame.groupby(["config_id", "rep"])["duration_ns"].sum()
    values = []
    for config_id, group in per_rep.groupby(level="config_id"):
        reps_ns = list(group)
        values.append((statistics.median(reps_ns), int(config_id), min(reps_ns), max(reps_ns)))
    values.sort()
    _, winner, low, high = values[0]
    return winner, [c for _, c, lo, hi in values if lo <= high and low <= hi]


def test_same_winner_direct_against_graph_of_one_ncu_run():
    rows = pd.DataFrame(truth_rows(recorded("profile_ncu.csv"), Truth("ncu")))
    floors = winner_stability(mode_floor(rows, ["ncu:direct", "ncu:graph"]), rows)
    direct = floors.set_index("truth").loc["ncu:direct"]
    want_direct, want_graph = (
        expected_pick("profile_ncu.csv", "direct"),
        expected_pick("profile_ncu.csv", "graph"),
    )
    assert want_direct[0] == want_graph[0]  # the case this test is about: one winner in both modes
    assert (direct["winner"], direct["tie_set"]) == want_direct
    assert (direct["winner_against"], direct["tie_set_against"]) == want_graph
    assert direct["against"] == "ncu:graph" and direct["winners"] == "same"
    assert f"same winner: config {want_direct[0]}" in format_floors(floors)


def test_tied_winners_each_inside_the_other_runs_tie_set():
    truth = Truth("nsys")
    first = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", modes=("graph",)), truth))
    again = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", reps=[0, 1, 3], modes=("graph",)), truth))
    floors = winner_stability(noise_floor(first, again), first, again)
    row = floors.iloc[0]
    want_a, want_b = (
        expected_pick("profile_nsys.csv", "graph"),
        expected_pick("profile_nsys.csv", "graph", [0, 1, 3]),
    )
    assert want_a[0] != want_b[0] and want_b[0] in want_a[1] and want_a[0] in want_b[1]  # a tie, both ways
    assert (row["winner"], row["tie_set"], row["winner_against"], row["tie_set_against"]) == (
        *want_a,
        *want_b,
    )
    assert row["truth"] == "nsys:graph" and row["winners"] == "tied"
    text = format_floors(floors)
    assert f"tied: config {want_a[0]} vs {want_b[0]} in the repeat" in text

    # beside the floor in the agreement table, and in the JSON document's noise_floor rows
    per_config = pd.concat([first, first.assign(method="cupti")])
    table = agreement(per_config, ["cupti"], ["nsys:graph"])
    header, _, line = format_agreement(table, floors).splitlines()
    assert header.split()[-2:] == ["floor", "winners"] and line.split()[-1] == "tied"
    document = json.loads(validate_document([agreement_record(table, per_config, floors, "v", repeat=again)]))
    floor_doc = document["noise_floor"][0]
    assert floor_doc["winners"] == "tied" and floor_doc["tie_set"] == want_a[1]
    assert floor_doc["tie_set_against"] == want_b[1]
    assert len(document["repeat_per_config"]) == len(again)


def test_different_winners_one_outside_the_other_runs_tie_set():
    truth = Truth("nsys")
    first = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", reps=[0, 1, 3], modes=("graph",)), truth))
    again = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", reps=[2, 4], modes=("graph",)), truth))
    row = winner_stability(noise_floor(first, again), first, again).iloc[0]
    want_a, want_b = (
        expected_pick("profile_nsys.csv", "graph", [0, 1, 3]),
        expected_pick("profile_nsys.csv", "graph", [2, 4]),
    )
    assert want_a[0] != want_b[0] and want_a[0] not in want_b[1]  # the case: not a tie both ways
    assert (row["winner"], row["tie_set"], row["winner_against"], row["tie_set_against"]) == (
        *want_a,
        *want_b,
    )
    assert row["winners"] == "different"
    text = format_floors(winner_stability(noise_floor(first, again), first, again))
    assert f"{want_a[0]} outside the repeat's tie set {{{', '.join(map(str, want_b[1]))}}}" in text


def test_one_rep_per_config_has_no_tie_set_to_test():
    truth = Truth("nsys")
    first = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", reps=[0], modes=("graph",)), truth))
    again = pd.DataFrame(truth_rows(recorded("profile_nsys.csv", reps=[3], modes=("graph",)), truth))
    row = winner_stability(noise_floor(first, again), first, again).iloc[0]
    expected = {
        "same"
        if expected_pick("profile_nsys.csv", "graph", [0])[0]
        == expected_pick("profile_nsys.csv", "graph", [3])[0]
        else "untested"
    }
    assert row["tie_set"] is None and row["tie_set_against"] is None
    assert {row["winners"]} == expected


def test_the_validate_page_shows_winner_stability():
    from nsprof.render.html import validate_page
    from nsprof.validate import ValidateResult

    rows = pd.DataFrame(truth_rows(recorded("profile_ncu.csv"), Truth("ncu")))
    floors = winner_stability(mode_floor(rows, ["ncu:direct", "ncu:graph"]), rows)
    per_config = pd.concat([rows, rows[rows["method"] == "ncu:direct"].assign(method="cupti")])
    table = agreement(per_config, ["cupti"], ["ncu:direct", "ncu:graph"])
    page = validate_page(
        ValidateResult(
            per_config=per_config,
            agreement=table,
            floors=floors,
            verdict="v",
            timers=["cupti"],
            truths=["ncu:direct", "ncu:graph"],
            configs=None,
            conditions={"ncu:direct": "ncu --clock-control base"},
        )
    )
    floor_html = page[page.index('id="noise-floor"') :]
    floor_html = floor_html[: floor_html.index("</table>")]
    assert "<th>winners</th>" in floor_html
    assert f"same winner: config {expected_pick('profile_ncu.csv', 'direct')[0]}" in floor_html
    assert 'id="conditions"' in page and "ncu --clock-control base" in page


@pytest.mark.parametrize(
    "spec, name, clock, cache",
    [
        ("ncu", "ncu", "base", "all"),
        ("ncu@base-cold", "ncu", "base", "all"),
        ("ncu@free-warm", "ncu@free-warm", "none", "none"),
        ("ncu@free-cold", "ncu@free-cold", "none", "all"),
        ("ncu@base-warm", "ncu@base-warm", "base", "none"),
    ],
)
def test_truth_conditions_parse(spec, name, clock, cache):
    truth = Truth.parse(spec)
    assert (truth.name, truth.clock_control, truth.cache_control) == (name, clock, cache)
    assert truth.method("graph") == f"{name}:graph"


@pytest.mark.parametrize("spec", ["nsys@base-cold", "nsys@free-warm", "nsys@base-warm", "nsys@fast"])
def test_a_truth_naming_a_condition_its_tool_cannot_give_is_refused_naming_what_it_takes(spec):
    from nsprof.errors import NsprofError

    with pytest.raises(NsprofError) as info:
        Truth.parse(spec)
    assert str(info.value) == (
        f"truth {spec!r}: nsys cannot set clocks or caches, so it takes no condition: give plain nsys "
        "(a condition @CLOCK-L2 is for ncu)"
    )
    assert Truth.parse("nsys") == Truth("nsys") and Truth.parse(" nsys ").name == "nsys"


@pytest.mark.parametrize("spec", ["ncu@free", "ncu@fast-warm", "ncu@free-hot", "ncu@"])
def test_a_bad_truth_condition_is_one_line(spec):
    from nsprof.errors import NsprofError

    with pytest.raises(NsprofError, match="CLOCK-L2") as info:
        Truth.parse(spec)
    assert "\n" not in str(info.value)


def test_the_truths_that_take_a_condition_are_those_whose_drivers_control_clocks_and_caches():
    from nsprof import truth
    from nsprof.drivers import registry
    from nsprof.errors import NsprofError

    taking = {name for name in truth.BUILTIN_BACKENDS if registry.driver_class(name).controls_conditions}
    assert taking == set(truth.BUILTIN_CONDITIONED) == {"ncu"}
    assert Truth.parse("ncu@free-warm") == Truth("ncu", "free", "warm")
    with pytest.raises(NsprofError, match="give plain none"):
        Truth.parse("none@free-warm")
    with pytest.raises(NsprofError, match="give plain nsys"):
        Truth.parse(Truth("nsys", "free", "warm"))  # a Truth built by hand is checked as its name

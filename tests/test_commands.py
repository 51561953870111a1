"""nsprof.commands: each command takes settings and plain values (no click object) and raises
NsprofError; an OptionError (options that do not go together, a value an option cannot take) is
what nsprof.cli shows as a usage error naming the option. The settings check what the command
line used to check again itself."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from nsprof.errors import OptionError
from nsprof.settings import TuneSettings, ValidateSettings

RAW = FIXTURES / "fixture_node_raw.csv"


def test_commands_take_plain_values_and_raise_option_errors():
    from nsprof.commands import common, tune
    from nsprof.commands.analyze import View, analyze

    with pytest.raises(OptionError, match="^--compare takes exactly two report files$") as info:
        analyze([RAW], View(), compare=True)
    assert info.value.option is None
    with pytest.raises(OptionError, match="--json and --csv - would both write to standard output"):
        common.one_on_stdout(**{"--json": True, "--csv -": True})
    with pytest.raises(OptionError, match="--verbose shows the Dask workers' state"):
        common.cluster_settings(None, None, True)
    assert common.cluster_settings(None, None, False) is None
    assert tune.truth_list("ncu, nsys", None) == ("ncu", "nsys")
    assert tune.truth_list("nsys", "nsys") == ("nsys",)


def test_analyze_returns_its_exit_status_and_prints_what_it_read(tmp_path, capsys):
    from nsprof.commands.analyze import View, analyze

    assert analyze([RAW], View(style="csv")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("file,") and str(RAW) in out
    assert analyze([RAW, tmp_path / "missing.csv"], View(style="csv")) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"nsprof: error: {tmp_path / 'missing.csv'}: no such file"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"use_store": False, "resume": True}, r"--resume needs the results store \(drop --no-store\)"),
        ({"retry_failed": True}, "--retry-failed goes with --resume"),
        ({"reps": 5, "max_reps": 2}, r"--max-reps \(2\) must be at least --reps \(5\)"),
    ],
)
def test_tune_settings_check_the_options_that_go_together(kwargs, message):
    with pytest.raises(OptionError, match=message) as info:
        TuneSettings(**kwargs)
    assert info.value.option is None


@pytest.mark.parametrize(
    ("kwargs", "option", "message"),
    [
        ({"truths": ("bogus",)}, "--truth", "choose from ncu, nsys"),
        ({"truths": ()}, "--truth", "choose from ncu, nsys"),
        ({"truths": ("ncu@hot-cold",)}, "--truth", "a condition is @CLOCK-L2"),
        ({"modes": ("direct", "x")}, "--mode", "choose from direct, graph"),
    ],
)
def test_validate_settings_name_the_option_they_refuse(kwargs, option, message):
    with pytest.raises(OptionError, match=message) as info:
        ValidateSettings(**kwargs)
    assert info.value.option == option


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["tune", "t.py:space", "--no-store", "--resume"],
            "Error: --resume needs the results store (drop --no-store)",
        ),
        (
            ["validate", "t.py:space", "--mode", "x"],
            "Error: Invalid value for --mode: choose from direct, graph",
        ),
        (
            ["profile", "t.py:space", "--configs", "a"],
            "Error: Invalid value for --configs: --configs takes integers",
        ),
        (
            ["profile", "t.py:space", "--devices", ","],
            "Error: Invalid value for --devices: --devices takes GPU",
        ),
        (["analyze", str(RAW), "--compare"], "Error: --compare takes exactly two report files"),
    ],
)
def test_an_option_error_is_a_usage_error_before_any_work(args, line):
    """No target is loaded (t.py does not exist): the options are refused first."""
    from nsprof.cli import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.startswith("Usage: ") and f"Try 'cli {args[0]} --help' for help." in result.output
    assert result.output.strip().splitlines()[-1].startswith(line), result.output

"""Bad input that used to get past the options: said in one line before anything is measured (a repeated
config id or mode that doubled a config's time, an output path under a file that lost the run at its
end, an empty list that meant "all", non-finite numbers) or read as one line (a saved run that is not
UTF-8). CliRunner in-process where the options decide; the target records any import of it, so that
"nothing measured" is seen, not assumed."""

from __future__ import annotations

import pytest
from conftest import run_nsprof

TARGET = """
open({marker!r}, "a").write("imported\\n")
import nsprof.space

space = nsprof.space.Space(configs=[{{"i": 0}}, {{"i": 1}}], build=lambda c: (lambda: None), device="cpu")
"""


@pytest.fixture
def target(tmp_path):
    (tmp_path / "t.py").write_text(TARGET.format(marker=str(tmp_path / "imported")))
    (tmp_path / "afile").write_text("x")
    return tmp_path


def _refused(ran, *words) -> str:
    text = ran.stderr.strip()
    assert ran.returncode != 0, ran.stdout
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    for word in words:
        assert word in text, text
    return text


@pytest.mark.parametrize(
    "args, words",
    [
        (["profile", "t.py:space", "--configs", "0,0,1"], ["--configs", "0"]),
        (["tune", "t.py:space", "--configs", "1,1"], ["--configs", "1"]),
        (["profile", "t.py:space", "--configs", ""], ["--configs"]),
        (["validate", "t.py:space", "--mode", "direct,direct"], ["--mode", "direct"]),
        (["validate", "t.py:space", "--timers", ""], ["--timers"]),
        (["validate", "t.py:space", "--timers", ","], ["--timers"]),
        # an empty item in a comma list is a slip, refused everywhere (some lists dropped it silently)
        (["profile", "t.py:space", "--configs", "0,,1"], ["--configs", "'0,,1'"]),
        (["tune", "t.py:space", "--configs", "0,"], ["--configs", "'0,'"]),
        (["profile", "t.py:space", "--devices", "0,,1"], ["--devices", "'0,,1'"]),
        (["validate", "t.py:space", "--mode", ",direct"], ["--mode", "',direct'"]),
        (["validate", "t.py:space", "--truth", "ncu,,nsys"], ["--truth", "'ncu,,nsys'"]),
        (["tune", "t.py:space", "--truth", "nsys,"], ["--truth", "'nsys,'"]),
        # a truth named twice: refused as a repeated timer or mode is (validate dropped it silently)
        (["validate", "t.py:space", "--truth", "ncu,ncu"], ["--truth", "ncu more than once"]),
        (["profile", "t.py:space", "--csv", "afile/x.csv"], ["afile"]),
        (["validate", "t.py:space", "--save", "afile/x.json"], ["afile"]),
        (["tune", "t.py:space", "--html", "afile/sub/x.html"], ["afile"]),
        (["tune", "t.py:space", "--plot", "afile/x.png"], ["afile"]),
        (["tune", "t.py:space", "--store", "r.sqlite", "--no-store"], ["--store", "--no-store"]),
        (["tune", "t.py:space", "--top", "3"], ["--top", "--prescreen"]),
        (["profile", "t.py:space", "--scheduler", ""], ["--scheduler", "address"]),
        (["tune", "t.py:space", "--scheduler", " "], ["--scheduler", "address"]),
    ],
)
def test_refused_in_one_line_before_anything_is_measured(target, args, words):
    ran = run_nsprof(*args, cwd=target, in_process=True)
    _refused(ran, *words)
    assert not (target / "imported").exists()


def test_serve_refuses_an_idle_exit_that_is_not_a_number(target):
    _refused(run_nsprof("serve", "--idle-exit", "nan", cwd=target, in_process=True), "--idle-exit")


@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
def test_a_size_or_wait_from_the_environment_must_be_finite(value, monkeypatch):
    from nsprof.errors import ReportError
    from nsprof.reports.inputs import env_number

    monkeypatch.setenv("NSPROF_MAX_STREAM_BYTES", value)
    with pytest.raises(ReportError, match="NSPROF_MAX_STREAM_BYTES"):
        env_number("NSPROF_MAX_STREAM_BYTES", 1.0)


def test_results_of_a_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "u.json").write_bytes(b"\xff\xfe{}")
    _refused(run_nsprof("results", "u.json", cwd=tmp_path, in_process=True), "u.json")

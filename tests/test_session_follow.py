"""nsprof.session.supervise.follow: the one loop that follows a worker's status file, for a session's
parts and for nsprof serve's jobs. In-process, with a status file written by the test."""

from __future__ import annotations

from nsprof.session.supervise import follow


def _follow(status_file, script, timeout_s=3600.0, bound_s=3600.0):
    """Follow `status_file`; before round i, script[i] (if any) is appended to it by check; the loop ends
    the round after the script is spent. (events notified, rounds seen as (checked, status, passed))."""
    events, rounds = [], []

    def check():
        index = len(rounds)
        if index < len(script):
            with open(status_file, "a") as out:
                out.write(script[index])
        return index

    def decide(checked, status, passed):
        rounds.append((checked, status, passed))
        return "over" if checked >= len(script) else None

    result = follow(status_file, timeout_s, bound_s, check, decide, lambda *event: events.append(event))
    return result, events, rounds


def test_follow_tells_each_done_and_fail_once_and_returns_what_decide_gives(tmp_path):
    status_file = tmp_path / "part0.status"
    status_file.write_text("")
    script = ["pid 1\nstart 0\n", "done 0\nstart 1\n", 'fail 1 crash "boom"\nstart 2\n', "done 2\nend\n"]
    result, events, rounds = _follow(status_file, script)
    assert result == "over"
    assert [(event, point) for event, point, _ in events] == [("done", 0), ("fail", 1), ("done", 2)]
    assert str(events[1][2]) == "boom" and events[1][2].kind == "crash"
    assert [checked for checked, _, _ in rounds] == [0, 1, 2, 3, 4]
    assert rounds[-1][1].ended and rounds[-1][1].done == [0, 2]


def test_follow_reads_the_status_after_check_so_the_last_lines_are_seen(tmp_path):
    # check() is what says a run is over (the profiler's exit): the status read after it holds the run's
    # last lines, so that a config done just before the end is told, not lost
    status_file = tmp_path / "part0.status"
    status_file.write_text("pid 1\nstart 0\n")
    result, events, rounds = _follow(status_file, ["done 0\nend\n"])
    assert result == "over"
    assert rounds[0][0] == 0 and rounds[0][1].done == [0]
    assert events == [("done", 0, "")]


def test_follow_says_which_bound_the_worker_went_past(tmp_path):
    # A negative bound is past at once: "timeout" while a config is current, "stalled" outside one
    running = tmp_path / "running.status"
    running.write_text("pid 1\nstart 0\n")
    _, _, rounds = _follow(running, [], timeout_s=-1.0)
    assert [passed for _, _, passed in rounds] == ["timeout"]
    between = tmp_path / "between.status"
    between.write_text("pid 1\nstart 0\ndone 0\n")
    _, _, rounds = _follow(between, [], bound_s=-1.0)
    assert [passed for _, _, passed in rounds] == ["stalled"]
    _, _, rounds = _follow(between, [])
    assert [passed for _, _, passed in rounds] == [None]


def test_a_missing_status_file_reads_as_nothing_yet(tmp_path):
    result, events, rounds = _follow(tmp_path / "not-there.status", [])
    assert result == "over" and events == []
    assert rounds[0][1].pid is None and rounds[0][1].done == []

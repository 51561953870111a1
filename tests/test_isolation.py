"""The suite never touches machine-wide state: another nsprof or test run on the box cannot change it."""

from __future__ import annotations

from nsprof.host.lock import lock_dir, lock_path


def test_every_test_has_its_own_lock_folder(tmp_path):
    assert lock_dir().is_relative_to(tmp_path), lock_dir()
    assert lock_path(0).is_relative_to(tmp_path)

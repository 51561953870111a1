"""Configs as table cells, shared by tune's and validate's tables and the report page: the keys
all configs share (split_configs, constant_line), a config's cell (config_cell), and a config
looked up by id (config_of, config_name).
"""

from __future__ import annotations

from collections.abc import Sequence

from nsprof.analysis.stats import is_missing
from nsprof.errors import printable
from nsprof.space import config_label


def split_configs(configs: Sequence) -> tuple[dict, list | None]:
    """(the keys every config has with one same value, the other keys in order of first
    appearance) of a space's dict configs; ({}, None) when some config is not a dict, when there
    are fewer than 2, or when no key is the same in all or none differs (then each config is
    shown whole)."""
    if len(configs) < 2 or not all(isinstance(c, dict) for c in configs):
        return {}, None
    keys = list(dict.fromkeys(k for c in configs for k in c))
    constant = {k: configs[0][k] for k in keys if all(k in c and _same(c[k], configs[0][k]) for c in configs)}
    varying = [k for k in keys if k not in constant]
    return (constant, varying) if constant and varying else ({}, None)


def _same(a, b) -> bool:
    """Whether two config values are one value as the store keys them (their canonical JSON): 1, 1.0 and
    True are three, a tuple and a list of the same items one; scalars compared without JSON."""
    if type(a) in _SCALARS and type(b) in _SCALARS:
        return type(a) is type(b) and (repr(a) == repr(b) if type(a) is float else a == b)
    from nsprof.store_rows import config_json

    return config_json(a) == config_json(b)


_SCALARS = (str, int, float, bool, type(None))


def constant_line(constant: dict) -> list[str]:
    """The line above a table whose config cells leave out the keys all configs share."""
    return (
        [printable(f"all configs: {', '.join(f'{k}={v}' for k, v in constant.items())}")] if constant else []
    )


def config_cell(config, label, varying: list | None) -> str:
    """A config's cell, never cut: the keys that vary across the space (`varying`: split_configs),
    else its label (the table's `config`) whole."""
    if varying is None or not isinstance(config, dict) or label != config_label(config):
        return "-" if is_missing(label) else printable(label)
    return printable(",".join(f"{k}={config[k]}" for k in varying if k in config)) or "-"


def config_of(configs: Sequence | None, config_id):
    """The config `config_id` of a space, None where the space has no such config."""
    i = int(config_id)
    return configs[i] if configs is not None and 0 <= i < len(configs) else None


def config_name(configs: Sequence | None, config_id) -> str:
    """The label of the config `config_id` of a space, "?" where the space has no such config."""
    i = int(config_id)
    return config_label(configs[i]) if configs is not None and 0 <= i < len(configs) else "?"

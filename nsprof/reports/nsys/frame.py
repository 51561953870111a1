"""Typed column arrays -> the tidy frame (exactly nsprof.schema's columns and dtypes).

Integer arrays carry sqlite.NULL where a value is not known; string arrays are object
arrays of str. The arrays go into the frame without copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from nsprof.reports.nsys.sqlite import NULL
from nsprof.schema import COLUMN_DTYPES, COLUMNS

if TYPE_CHECKING:
    import pandas as pd


def int_array(values: np.ndarray):
    import pandas as pd

    return pd.arrays.IntegerArray(values, values == NULL)


def string_array(values: np.ndarray, missing: np.ndarray | None = None):
    """Object array of str -> pandas "string" array (NA where `missing`), in place."""
    import pandas as pd

    if missing is not None:
        values[missing] = pd.NA
    try:
        # Explicit storage: pandas 3's default StringDtype() may name pyarrow storage.
        return pd.arrays.StringArray(values, dtype=pd.StringDtype("python"))
    except TypeError:  # pandas 2: no dtype argument, and python storage
        return pd.arrays.StringArray(values)


def constant_strings(value: str, n: int):
    values = np.empty(n, dtype=object)
    values.fill(value)  # one shared str; np.full would make n copies through a '<U' array
    return string_array(values)


def build_frame(columns: dict, n: int) -> pd.DataFrame:
    """The tidy frame, exactly schema.COLUMNS and COLUMN_DTYPES, from typed column arrays.

    Not schema.make_frame: it parses range names row by row (~3 s for 1M rows); here they
    are parsed once per distinct name with the same parse_range_name, and the arrays go
    into the frame without copies.
    """
    import pandas as pd

    for name, dtype in COLUMN_DTYPES.items():
        if name not in columns:  # a column nsys cannot know (e.g. "error")
            empty = np.nan if dtype == "float64" else pd.NA
            columns[name] = pd.Series(empty, index=pd.RangeIndex(n), dtype=dtype).array
    frame = pd.DataFrame({name: columns[name] for name in COLUMNS}, copy=False)
    wanted = {name: pd.api.types.pandas_dtype(dtype) for name, dtype in COLUMN_DTYPES.items()}
    if any(dtype != wanted[name] for name, dtype in frame.dtypes.items()):
        frame = frame.astype(COLUMN_DTYPES)  # a safety net; the arrays are typed already
    return frame

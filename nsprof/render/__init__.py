"""Words, tables, JSON and plots for what nsprof.analysis computes; nothing here measures.

- `text`: cells (durations, numbers, missing values) and the fixed-width table.
- `configs`: configs as table cells (the keys all share, a config by id), for the tables below.
- `analyze_tables`: analyze's summary, per-kernel and comparison tables.
- `run_tables`: profile's per-config table and results' runs of the store.
- `tune_tables`: tune's ranked and per-shape tables, its decision lines and notes.
- `crosstruth_words`: several truths' winners compared, the cause of a disagreement, the verdict.
- `validate_tables`: validate's agreement, per-config, floors and matched tables, and its verdict.
- `notes`: analyze's notes on a report.
- `json`: the JSON documents (tidy rows, validate's agreement, tune's ranking).
- `plot`: validate's agreement plot, and the one matplotlib check.
- `tune_plot`: tune's ranking plot.
- `html`: the self-contained report page of validate and tune.

It imports nsprof.analysis, schema, space, errors and the package version, never the orchestration above it
(profile, validate, tune) nor the CLI. Importing it is cheap (pandas, numpy and matplotlib
load on first use).
"""

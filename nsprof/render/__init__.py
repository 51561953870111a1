"""Words, tables, JSON and plots for what nsprof.analysis computes; nothing here measures.

- `text`: cells (durations, numbers, missing values) and the fixed-width table.
- `tables`: every table nsprof prints (analyze, profile, tune, validate, results) and the verdict.
- `notes`: analyze's notes on a report.
- `json`: the JSON documents (tidy rows, validate's agreement, tune's ranking).
- `plot`: validate's agreement plot, and the one matplotlib check.
- `tune_plot`: tune's ranking plot.
- `html`: the self-contained report page of validate and tune.

It imports nsprof.analysis, schema, space, errors and the package version, never the orchestration above it
(profile, validate, tune) nor the CLI. Importing it is cheap (pandas, numpy and matplotlib
load on first use).
"""

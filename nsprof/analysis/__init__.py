"""Pure data work on tidy frames; nothing here measures, reads files or prints.

- `summary`: per-range/kernel statistics of a report (`summarize`, public as `nsprof.summarize`),
  kernel keys, comparison of two reports.
- `stats`: rank statistics (Kendall τ-b, Spearman ρ, average ranks) without scipy.
- `agreement`: how well fast timers rank configs like a ground truth; noise floors; the
  recommendation and verdict as data.
- `ranking`: configs ranked by a measured statistic (`nsprof tune`).

It imports only nsprof.errors, schema, settings, space and its own modules; nsprof.render
words and draws what it computes. Importing it is cheap (pandas loads on first use).
"""

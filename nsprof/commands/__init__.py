"""The commands behind `nsprof`'s command line, one module each: analyze, profile, tune, validate,
results, serve, doctor; `common` holds what several of them share (the target's loading, the
cluster, the outputs on standard output). Each takes settings and plain values, raises NsprofError
(OptionError for options that do not go together) and prints its results; nsprof.cli parses the
options and turns the errors into one line."""

"""Drivers: find the Nsight tools, build their command lines, run them, collect reports."""

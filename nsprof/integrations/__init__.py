"""Hooks into the autotuners people already use (Triton, TileLang)."""

"""Drivers: one per profiler (ncu, nsys, none), each a nsprof.drivers.base.Driver, named in
nsprof.drivers.registry, the only map from backend names to drivers."""

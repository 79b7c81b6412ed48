"""Capacity: the highest load at which a workload still meets its SLOs.

:mod:`.capacity` runs the search (a bracket, then bisection, over a rate or a concurrency),
:mod:`.stop` decides when a point has run long enough, and :mod:`.outcome` turns the points into
a capacity that never exceeds what the server carried.
"""

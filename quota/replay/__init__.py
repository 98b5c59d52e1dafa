"""Replaying a GPU cluster's job trace through the quota engine.

``trace`` reads the trace, ``policies`` makes the quota files a replay compares,
``simulation`` plays the trace on a simulated clock, ``metrics`` sums it up and
``report`` draws it (self-contained HTML). Nothing here touches the network or a
database.
"""

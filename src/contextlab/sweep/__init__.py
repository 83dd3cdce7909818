"""Sweeps over (context, model size, budget, packing, objective) and their analysis.

``grid`` expands and runs a sweep file (resumable, N runs at a time, one process each);
``folder`` keeps a sweep folder to one sweep configuration (runs trained with another config,
run folders outside the grid); ``compute_optimal`` turns its results into the compute-optimal
context analysis.
"""

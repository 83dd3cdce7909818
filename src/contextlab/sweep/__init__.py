"""Sweeps over (context, model size, budget, packing, objective) and their analysis.

``spec`` reads a sweep file and expands its grid into validated runs; ``runner`` runs them
(resumable, N at a time, one process each; ``ray_runner`` as Ray tasks); ``results`` writes what
they measured to results.csv; ``folder`` keeps a sweep folder to one sweep configuration (runs
trained with another config, run folders outside the grid); ``compute_optimal`` turns the results
into the compute-optimal context analysis.
"""

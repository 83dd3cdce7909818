"""Paired comparisons of two models' evaluation results (``contextlab compare A B``).

Reads result files only (``eval/<name>.json`` and the per-sample arrays beside them), never a
model: ``pairing.py`` checks that both sides scored the same samples (and says why not);
``paired.py`` holds ``COMPARERS``, one per evaluation, and ``compare_runs``; ``fit.py``
(Bayes-risk fits) and ``infill.py`` are the comparers that need more than a paired mean;
``plots.py`` draws every comparison from its JSON. The intervals come from
``contextlab.eval.paired_stats``.
"""

from contextlab.compare.paired import COMPARERS, Options, compare_runs

__all__ = ["COMPARERS", "Options", "compare_runs"]

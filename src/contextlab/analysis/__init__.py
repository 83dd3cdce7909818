"""Analyses of a model's insides (``contextlab analyze``): where attention goes, and the
intrinsic entropy and dimension of hidden states against context length.

They run through the same adapter as the evaluations and write the same result files
(``eval.results.run_and_record``), but they are not evaluations of context use on a task:
they look at activations. ``attention.py`` (+ ``attention_measures.py``, ``attention_plots.py``),
``entropy.py`` (+ ``entropy_plots.py``) over ``intrinsic.py``'s measures (numpy only).
"""

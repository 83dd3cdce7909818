"""Pretraining objectives, chosen by name in the config (``objective.name``).

A plain dict of name -> class; each class documents itself and its ``Options``.
"""

from contextlab.objectives.base import Objective, TrainModule
from contextlab.objectives.clm import CLM

OBJECTIVES: dict[str, type[Objective]] = {
    "clm": CLM,
}

__all__ = ["OBJECTIVES", "Objective", "TrainModule"]

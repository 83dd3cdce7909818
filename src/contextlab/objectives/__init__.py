"""Pretraining objectives, chosen by name in the config (``objective.name``).

A plain dict of name -> class; each class documents itself and its ``Options``
(``[objective] options = {...}`` in a run config). Objectives that train a different
architecture name it in ``arch`` (see ``contextlab.models.archs``).
"""

from contextlab.objectives.base import Batch, Objective, TrainModule
from contextlab.objectives.clm import CLM
from contextlab.objectives.contextlm import ContextLMObjective
from contextlab.objectives.fim import FIM
from contextlab.objectives.last_token import LastToken
from contextlab.objectives.mlm import MLM
from contextlab.objectives.mtp import MTP
from contextlab.objectives.prefix_lm import PrefixLM
from contextlab.objectives.queries import Queries
from contextlab.objectives.recall import Recall
from contextlab.objectives.span import SpanCorruption
from contextlab.objectives.ul2 import UL2

OBJECTIVES: dict[str, type[Objective]] = {
    "clm": CLM,
    "mlm": MLM,
    "span": SpanCorruption,
    "prefix_lm": PrefixLM,
    "fim": FIM,
    "mtp": MTP,
    "ul2": UL2,
    "contextlm": ContextLMObjective,
    "last_token": LastToken,  # loss on the final target(s) only (answer tokens, synthetic parity)
    "queries": Queries,  # a shared context and K independent questions per row (parity training)
    "recall": Recall,  # loss on the answers of associative-recall rows only (MQAR)
}

__all__ = ["OBJECTIVES", "Batch", "Objective", "TrainModule"]

"""The quickstart: the whole toolkit once, on the corpus shipped with the package, in minutes.

``run_quickstart(load_recipe(), OUT)`` ingests the embedded books and the Python standard
library, packs the code with example packing and SPLICE, trains a tiny GPT and a tiny
ContextLM, measures their contextwise loss and needle-in-a-haystack accuracy, and writes
an HTML report; ``corpus.source`` (``--corpus``) puts a folder of the user's in place of the
standard library. ``recipe.toml`` (packaged) holds every setting; ``config`` reads and checks
it, ``pipeline`` runs the resumable steps, ``summary`` computes the headline numbers.
"""

from contextlab.quickstart.config import QuickstartConfig, load_recipe, packaged_recipe
from contextlab.quickstart.pipeline import run_quickstart
from contextlab.quickstart.summary import format_headline

__all__ = ["QuickstartConfig", "format_headline", "load_recipe", "packaged_recipe", "run_quickstart"]

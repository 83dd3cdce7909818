"""contextlab: measure and improve how language models use their context.

The package is layered (docs/architecture.md draws the layers): ``data`` (sources, tokenizers, token stores,
packing), ``models`` (torch only), ``objectives``, ``train``, ``eval``, ``report`` and the
command line in ``cli``. Import the layer you need; nothing heavy is imported here.
"""

__version__ = "0.1.0"
FORMAT_VERSION = 1

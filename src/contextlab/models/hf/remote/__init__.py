"""The Hugging Face implementation of contextlab's models, shipped inside every custom-code export.

``configuration_contextlab.py`` and ``modeling_contextlab.py`` import only torch and
transformers, so an export that carries them (with an ``auto_map`` in its config.json) loads
with ``trust_remote_code=True`` where contextlab is not installed. ``models/hf/custom_code.py`` builds its
registered classes on these same files: one implementation, used inside and outside contextlab.
"""

from pathlib import Path

REMOTE_FILES = ("configuration_contextlab.py", "modeling_contextlab.py")
REMOTE_DIR = Path(__file__).parent

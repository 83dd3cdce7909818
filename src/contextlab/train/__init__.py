"""Training: the trainer loop, optimiser and schedule, checkpoints, distributed setup, FLOPs/MFU.

Modules here may import ``models``, ``objectives`` and ``data``; ``eval`` never imports them.
"""

"""The data layer: corpus sources, tokenizers, token stores, ingest, views and statistics.

Uses numpy, tokenizers and retrieval libraries only (never torch). The flow is
``sources`` (documents) -> ``ingest`` (tokenize, resumable) -> ``store`` (memmapped token
store) -> ``views`` (long documents, train/validation splits).
"""

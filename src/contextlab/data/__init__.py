"""The data layer: corpus sources, tokenizers, token stores, ingest, views and statistics.

Uses numpy, tokenizers and retrieval libraries only (never torch). The flow is
``sources`` (documents) -> ``ingest`` (tokenize, resumable) -> ``store`` (memmapped token
store) -> ``views`` (long documents, train/validation splits). ``shards`` is the one engine
that runs sharded work (ingest parts, pack shards, export splits) in this process, a spawned
pool or on Ray, skipping shards whose done marker checks out.
"""

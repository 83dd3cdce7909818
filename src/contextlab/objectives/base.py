"""The objective interface: what the trainer needs from a pretraining objective.

An objective is an ``nn.Module`` (so it can own extra modules: heads, a context predictor)
that turns a batch of token rows into a loss. The model stays plain: the objective calls
its parts (``model(idx)``, ``model.trunk``, ``model.blocks``...) as it needs.

* ``forward(model, tokens, doc_ids)`` -> ``(loss, metrics)``: ``tokens`` is (B, T+1);
  ``doc_ids`` (B, T+1) marks packed documents (used when document masking is on).
* ``special_tokens``: names added to the tokenizer's vocabulary (FIM, sentinels...);
  after ``bind_tokenizer(spec)`` their ids are in ``self.special_ids`` (appended after the
  data's vocabulary, in order), and ``self.vocab_size`` is the model's vocabulary.
* ``arch``: which model architecture of ``contextlab.models`` the objective trains
  ("gpt" unless the objective needs extra model parts that inference also uses).
* ``extra_flops_per_token(cfg, context)``: what the objective adds to the model's FLOPs,
  so budgets compare objectives at equal compute.
* ``arch_options()``: the architecture's options (chunk size, heads...) taken from ``Options``,
  which extends the architecture's options dataclass (declared once, in the models layer).
* ``prefix_masks``: True when every row carries a bidirectional prefix (prefix LM, span
  corruption, UL2), so attention takes a described mask (``models/masks.py``) even without
  ``data.doc_mask``.
* ``Options``: a dataclass of the objective's own typed options (``[objective.NAME]``).
* ``lm_prefix`` / ``lm_loss``: how the trained model runs left to right over plain text, so
  every objective that allows it reports one comparable loss (the next-token cross-entropy of
  the validation rows) next to its own: ``()`` as it is, ``("[S]",)`` after UL2's mode token,
  ``None`` when it cannot (MLM, span corruption; ``not_lm`` says why). Evaluations and export,
  which treat a model as a causal LM, read the same record from the run's objective.

Most objectives are "rewrite the batch, then cross-entropy": they implement
``prepare(tokens, doc_ids) -> Batch`` (model inputs, labels with -100 = no loss, the
attention mask) and inherit ``forward``. Tests check ``prepare`` on hand-made rows.

Randomness (masks, spans, FIM splits): every row draws from a generator of its own
(``row_generators``, ``draw``), so a row's corruption never depends on the rows batched with it,
on the micro-batch size or on the number of processes. While training the trainer gives each row
a seed made of the run's seed, the step and the row's tokens (``training_row_seeds``, set as
``draw_seeds`` before each forward): a run of 1 or 2 processes, or of any micro-batch size, trains
on the same corruptions, each process draws its own (one global RNG per process drew the same
masks on every rank), a row seen again at a later step is corrupted anew, and resume is exact
without any RNG state. In eval mode the seed is the row's tokens alone, so every validation pass
scores the same corruptions (one generator for the batch gave 3.525 to 3.580 on the same 64 rows
of an mlm model). Called outside the trainer in train mode, without ``draw_seeds``, the draws come
from the global torch RNG.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contextlab.models.archs import arch_option_names
from contextlab.models.masks import AttentionMask
from contextlab.models.special_tokens import bind_special_tokens


def document_causal_mask(doc_ids: Tensor) -> AttentionMask:
    """(B, T) document ids -> causal attention within the same document (``.dense()``: (B, 1, T, T) bool)."""
    return AttentionMask(doc_ids.shape[1], segments=doc_ids)


def prefix_lm_mask(prefix_len: Tensor, T: int, doc_ids: Tensor | None = None) -> AttentionMask:
    """(B,) prefix lengths -> bidirectional inside the prefix, causal after it.

    Query q may see key k when k <= q or both lie in the prefix (k < P and q < P); with
    doc_ids (B, T) also only within the same document.
    """
    return AttentionMask(T, segments=doc_ids, prefix=prefix_len)


def next_token_loss(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy in fp32 over (B, T, V) logits and (B, T) targets."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction=reduction
    )


def masked_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy (fp32) over the positions whose label is not -100 (0 if none; no host sync)."""
    flat = labels.reshape(-1)
    total = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), flat, ignore_index=-100, reduction="sum"
    )
    return total / (flat != -100).sum().clamp(min=1)


def _seed_of(data: bytes, salt: bytes = b"") -> int:
    digest = hashlib.blake2b(data, digest_size=8, salt=salt).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def row_generator(row: Tensor, device) -> torch.Generator:
    """A generator seeded by the tokens of ``row``: the same row draws the same in any batch."""
    return torch.Generator(device=device).manual_seed(_seed_of(row.detach().cpu().numpy().tobytes()))


def training_row_seeds(rows: np.ndarray, seed: int, step: int) -> list[int]:
    """The seed of each training row (B, L) at ``step`` of a run seeded ``seed``: made of the three
    alone, so a row draws the same on any process and in any micro-batch, and anew at another step."""
    salt = np.array([seed, step], dtype="<i8").tobytes()  # blake2b's 16-byte salt
    return [_seed_of(np.ascontiguousarray(r, dtype="<i8").tobytes(), salt) for r in rows]


@dataclass
class Batch:
    """What an objective feeds the model: inputs, labels (-100 = no loss) and the attention."""

    inputs: Tensor  # (B, T) token ids
    labels: Tensor  # (B, T) target ids; -100 where there is no loss
    attn_mask: AttentionMask | Tensor | None = None  # described (models/masks.py) or dense bool; None = plain
    is_causal: bool = True  # False: attn_mask (or no mask: full attention) is used as given


class Objective(nn.Module):
    name = "base"
    arch = "gpt"
    special_tokens: tuple[str, ...] = ()
    prefix_masks = False  # every row gets a bidirectional prefix (an AttentionMask, even without doc_mask)
    lm_prefix: tuple[str, ...] | None = ()  # special tokens before plain text to run it left to right
    not_lm = ""  # why the model cannot be run left to right (when lm_prefix is None)
    loss_is_lm = False  # the objective's own loss is already the left-to-right loss (clm)
    loss_name = ""  # what its own loss is, as a run's summary names it ("" = "<name> loss")

    @dataclass
    class Options:
        pass

    def __init__(self, options: Objective.Options, *, doc_mask: bool = False):
        super().__init__()
        self.options = options
        self.doc_mask = doc_mask
        self.base_vocab = 0
        self.vocab_size = 0
        self.eot_id: int | None = None
        self.special_ids: dict[str, int] = {}
        self.draw_seeds: list[int] | None = None  # one per row of the next training forward (the trainer's)

    def bind_tokenizer(self, spec: dict) -> None:
        """Learn the data's tokenizer (a spec dict) and give the objective's special tokens ids."""
        self.base_vocab = int(spec["vocab_size"])
        self.eot_id = spec.get("eot_id")
        self.special_ids, self.vocab_size = bind_special_tokens(spec, self.special_tokens)

    def attn_mask(self, doc_ids: Tensor | None) -> AttentionMask | None:
        return document_causal_mask(doc_ids) if (self.doc_mask and doc_ids is not None) else None

    @torch.compiler.disable  # made anew every step: traced, its seeds would recompile the graph each time
    def row_generators(self, rows: Tensor, device=None) -> list[torch.Generator] | None:
        """A generator per row of ``rows`` (B, L) on ``device`` (default: the rows'): while training seeded
        by ``draw_seeds`` (the trainer's, one per row; None without them: the global RNG), in eval mode
        by that row's tokens."""
        device = device or rows.device
        if not self.training:
            return [row_generator(r, device) for r in rows]
        if self.draw_seeds is None:
            return None
        if len(self.draw_seeds) != len(rows):
            raise ValueError(f"{len(self.draw_seeds)} draw seeds for {len(rows)} rows")
        return [torch.Generator(device=device).manual_seed(s) for s in self.draw_seeds]

    @staticmethod
    def draw(gens: list[torch.Generator] | None, n: int, fn) -> Tensor:
        """``fn(k, generator)`` for ``n`` rows: one call with the global RNG (``gens`` None), else one
        call per row with its own generator, stacked along the first dimension."""
        if gens is None:
            return fn(n, None)
        return torch.cat([fn(1, g) for g in gens])

    @property
    def counts_tokens(self) -> bool:
        """Whether its forward returns ``loss_tokens`` (its rows score unequal numbers of targets): every
        ``prepare``-based objective, and those that say so."""
        return type(self).forward is Objective.forward

    def arch_options(self) -> dict:
        """Architecture ``arch``'s options (ContextLM's chunk size...) from ``self.options``; {} for a GPT."""
        return {name: getattr(self.options, name) for name in arch_option_names(self.arch)}

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        """Rows (B, T+1) -> the model's Batch. Objectives that rewrite the batch implement this."""
        raise NotImplementedError

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        batch = self.prepare(tokens, doc_ids)
        logits = model(batch.inputs, attn_mask=batch.attn_mask, is_causal=batch.is_causal).logits  # (B, T, V)
        loss = masked_loss(logits, batch.labels)
        return loss, {"loss_tokens": (batch.labels != -100).sum()}

    def extra_flops_per_token(self, cfg, context: int) -> float:
        return 0.0

    def lm_prefix_ids(self) -> list[int] | None:
        """The ids of ``lm_prefix`` (after ``bind_tokenizer``); None when the model is no left-to-right LM."""
        return None if self.lm_prefix is None else [self.special_ids[t] for t in self.lm_prefix]

    def lm_loss(self, model: nn.Module, tokens: Tensor) -> Tensor | None:
        """Mean next-token cross-entropy (fp32) of plain rows (B, T+1), the model run left to right
        after ``lm_prefix`` with causal attention; None when it cannot be run so."""
        ids = self.lm_prefix_ids()
        if ids is None:
            return None
        x, y = tokens[:, :-1], tokens[:, 1:]
        if ids:  # the prefix takes positions of the context: the row's last targets are not scored
            keep = x.size(1) - len(ids)  # (UL2's [S] and 128 tokens ran one position past its 128)
            x, y = x[:, :keep], y[:, :keep]
            lead = torch.tensor(ids, dtype=x.dtype, device=x.device).expand(x.size(0), -1)
            x = torch.cat([lead, x], dim=1)
        logits = model(x, is_causal=True).logits[:, len(ids) :]  # (B, T, V)
        return next_token_loss(logits, y)


class TrainModule(nn.Module):
    """Model + objective as one module, so DDP/FSDP and checkpoints see a single tree."""

    def __init__(self, model: nn.Module, objective: Objective):
        super().__init__()
        self.model = model
        self.objective = objective

    def forward(self, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        return self.objective(self.model, tokens, doc_ids)

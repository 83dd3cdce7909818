"""Controls: models whose use of their context is known, and the retrieval table they must score.

A retrieval accuracy means something only if a model that does not read its context scores
chance on it, and a model that does read it scores high. ``CopyLM`` is the positive control:
at every position it predicts the token that followed the most recent longest earlier match
of the suffix ending there (an in-context n-gram: what an ideal induction circuit computes),
with probability ``p``, the rest spread uniformly; it reads its context and nothing else.
The negative controls: two models run here through the same ``ModelAdapter`` and scoring path as
any checkpoint: a random-init tiny GPT (it attends to its context but has learned nothing to
retrieve with), and ``BigramLM``, whose logits depend on the current token only (log
bigram probabilities counted from a token store, add-one smoothed), shaped like a contextlab
model (``trunk`` / ``unembed`` / ``config``) so the contextlab backend runs it unchanged.
``negative_control`` runs every prompt task (needle, key-value, passkey, variable tracking,
ICL) at the settings of ``control_options`` and returns one row per task: accuracy, Wilson
interval, n, chance, and the calibrated scores.

Trade-off: short prompts and a byte tokenizer, so the whole table costs tens of CPU seconds
and runs as a test; the settings are fixed here (not tuned per model) so that the test and
``scripts/negative_control.py`` print the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor

import contextlab.eval.icl as icl
import contextlab.eval.kv as kv
import contextlab.eval.needle as needle
import contextlab.eval.passkey as passkey
import contextlab.eval.scoring as scoring
import contextlab.eval.tasks as tasks
import contextlab.eval.vartrack as vartrack
from contextlab.eval.adapter import ModelAdapter, in_memory_adapter

TASKS = ("niah", "kv", "passkey", "vartrack", "icl")


@dataclass
class CopyConfig:
    vocab_size: int
    context: int


class CopyLM(torch.nn.Module):
    """Next-token logits from in-context copying: the token after the most recent longest earlier
    match of the current suffix gets probability ``p``, every other token (1 - p) / (V - 1); a
    position whose token never occurred before gets the uniform distribution.

    Shaped like a contextlab model (``trunk`` / ``unembed`` / ``config``): the "hidden state" is
    (predicted id, whether there is one), and ``unembed`` spreads it over the vocabulary in the
    row chunks the backend asks for, so the full (B, T, V) logits never exist (a BPE vocabulary
    at thousands of tokens fits). Matching is exact dynamic programming over the row, O(T^2)."""

    def __init__(self, vocab_size: int, context: int = 4096, p: float = 0.9):
        super().__init__()
        if not 0.0 < p < 1.0:
            raise ValueError(f"p must lie in (0, 1), got {p}")
        self.config = CopyConfig(int(vocab_size), int(context))
        self.log_hit = float(np.log(p))
        self.log_miss = float(np.log((1.0 - p) / (vocab_size - 1)))
        self.log_uniform = float(-np.log(vocab_size))

    @staticmethod
    def predictions(rows: np.ndarray) -> np.ndarray:
        """For every row (B, T) and position t, the token after the most recent longest earlier match
        of the suffix ending at t (-1 where x[t] never occurred before): (B, T). All rows step
        through t together, so the Python loop runs T times per batch, not per row."""
        rows = np.atleast_2d(rows)
        B, T = rows.shape
        out = np.full((B, T), -1, dtype=np.int64)
        match = np.zeros((B, T), dtype=np.int64)  # match[b, s]: common suffix length ending at s and t
        order = np.arange(T)
        batch = np.arange(B)
        for t in range(1, T):
            new = np.zeros((B, T), dtype=np.int64)
            new[:, 1:t] = match[:, : t - 1] + 1  # extends the match that ended one step earlier
            new[:, 0] = 1
            new[:, :t] *= rows[:, :t] == rows[:, t : t + 1]
            match = new
            s = np.argmax(match[:, :t] * T + order[:t], axis=1)  # longest, then most recent
            found = match[batch, s] > 0
            out[found, t] = rows[batch[found], s[found] + 1]
        return out

    def trunk(self, idx: Tensor, return_hidden: list[int] | None = None) -> tuple[Tensor, list[Tensor]]:
        pred = torch.from_numpy(self.predictions(idx.detach().cpu().numpy())).to(idx.device)  # (B, T)
        h = torch.stack([pred.clamp_min(0).float(), (pred >= 0).float()], dim=-1)  # (B, T, 2)
        return h, [h for _ in return_hidden or []]

    def unembed(self, h: Tensor) -> Tensor:
        """(..., 2) -> (..., V) log-probabilities."""
        has = h[..., 1:2] > 0
        logits = torch.full((*h.shape[:-1], self.config.vocab_size), self.log_miss, device=h.device)
        logits.scatter_(-1, h[..., :1].long(), self.log_hit)
        return torch.where(has, logits, self.log_uniform)

    def forward(self, idx: Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.unembed(self.trunk(idx)[0]))

    def num_params(self, non_embedding: bool = False) -> int:
        return 0


@dataclass
class BigramConfig:
    vocab_size: int
    context: int


class BigramLM(torch.nn.Module):
    """Next-token logits from the current token alone: ``table[current]`` (V log-probabilities)."""

    def __init__(self, logprobs: Tensor, context: int):
        super().__init__()
        self.config = BigramConfig(int(logprobs.size(0)), context)
        self.register_buffer("table", logprobs.float())  # (V, V): row = current token

    def trunk(self, idx: Tensor, return_hidden: list[int] | None = None) -> tuple[Tensor, list[Tensor]]:
        h = self.table[idx]  # (B, T, V): the "hidden state" is the row of log-probabilities
        return h, [h for _ in return_hidden or []]

    def unembed(self, h: Tensor) -> Tensor:
        return h

    def forward(self, idx: Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.table[idx])

    def num_params(self, non_embedding: bool = False) -> int:
        return 0


def random_gpt(
    vocab_size: int, context: int, seed: int = 0, scale: float = 1.0, n_layer: int = 1, n_embd: int = 32
) -> torch.nn.Module:
    """A tiny GPT at its random init; ``scale`` > 1 multiplies its weight matrices, so that its outputs
    depend strongly on the context (the hard case for a balanced task) while nothing in it retrieves."""
    from contextlab.models.gpt import GPT, GPTConfig

    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab_size, n_layer=n_layer, n_head=2, n_embd=n_embd, context=context))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(scale)
    return model.eval()


def bigram_from_store(store, context: int = 4096, smoothing: float = 1.0) -> BigramLM:
    """A BigramLM of a token store's within-document bigram counts (plus ``smoothing`` per pair)."""
    V = int(store.tokenizer().vocab_size)
    counts = np.full((V, V), smoothing, dtype=np.float64)
    for doc in store:
        d = np.asarray(doc, dtype=np.int64)
        np.add.at(counts, (d[:-1], d[1:]), 1.0)
    logprobs = np.log(counts) - np.log(counts.sum(axis=1, keepdims=True))
    return BigramLM(torch.from_numpy(logprobs), context)


def control_adapter(model: torch.nn.Module, tokenizer, name: str, batch_size: int = 16) -> ModelAdapter:
    """A ModelAdapter for a control model (positions past its context allowed)."""
    return in_memory_adapter(model, tokenizer, name, batch_size=batch_size)


def control_options() -> dict:
    """Per task: its options at >= 500 samples of short prompts (byte tokens)."""
    depths = [0.0, 25.0, 50.0, 75.0, 100.0]
    return {
        "niah": needle.Options(lengths=[256], depths=depths, samples=20, scoring="likelihood"),
        "kv": kv.Options(
            n_examples=2, n_pairs=4, distractors=3, positions=[0, 3], sets=32, scoring="likelihood"
        ),
        "passkey": passkey.Options(lengths=[320], depths=depths, samples=20, scoring="likelihood"),
        "vartrack": vartrack.Options(lengths=[512], n_chains=4, hops=1, samples=125, scoring="likelihood"),
        "icl": icl.Options(shots=[4], n_test=12, seeds=42),
    }


def copy_options(length: int = 2048) -> dict:
    """Per task: its options for the positive control at >= 500 samples, prompts of about ``length``
    tokens (key-value: as many pairs as fit; ``kv_recall`` asks for the key restated as written)."""
    depths = [0.0, 25.0, 50.0, 75.0, 100.0]
    kv_pairs = max(4, min(75, length // 100))  # a lost-in-the-middle pair is ~90 bytes
    kv_options = dict(n_examples=2, n_pairs=kv_pairs, distractors=3, positions=[0, kv_pairs - 1], sets=32)
    return {
        "niah": needle.Options(lengths=[length], depths=depths, samples=20, scoring="likelihood"),
        "passkey": passkey.Options(lengths=[length], depths=depths, samples=20, scoring="likelihood"),
        "kv": kv.Options(**kv_options, scoring="likelihood"),
        "kv_recall": kv.Options(**kv_options, scoring="likelihood", query="restated"),
        "vartrack": vartrack.Options(
            lengths=[max(length, 512)], n_chains=4, hops=1, samples=125, scoring="likelihood"
        ),
        "icl": icl.Options(shots=[4], n_test=12, seeds=42),
    }


def fixture_data(fixtures: Path, tmp: Path) -> dict[str, str | None]:
    """The data of every control task from a folder laid out like the repository's tests/fixtures
    (Tiny Shakespeare as the haystack, lost-in-the-middle examples, TREC questions split by label
    into ``tmp``); passkey and vartrack make their own text."""
    trec = write_trec_split(Path(fixtures) / "trec_qc" / "train.txt", Path(tmp) / "trec")
    return {
        "niah": str(Path(fixtures) / "tinyshakespeare" / "input.txt"),
        "kv": str(Path(fixtures) / "lost_in_the_middle" / "kv-retrieval-75_keys.first2.jsonl.gz"),
        "passkey": None,
        "vartrack": None,
        "icl": str(trec),
    }


def write_trec_split(train_file: Path, out: Path, per_label: int = 2) -> Path:
    """A TREC folder from one labelled file: the first ``per_label`` questions of each label as test.txt,
    the rest as train.txt (so no test question is also a shot)."""
    lines = train_file.read_bytes().decode("latin-1").splitlines()
    seen: dict[str, int] = {}
    test, train = [], []
    for line in lines:
        label = line.split(":", 1)[0]
        (test if seen.get(label, 0) < per_label else train).append(line)
        seen[label] = seen.get(label, 0) + 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.txt").write_bytes(("\n".join(train) + "\n").encode("latin-1"))
    (out / "test.txt").write_bytes(("\n".join(test) + "\n").encode("latin-1"))
    return out


def _task_rows(adapter, name: str, o, data: str) -> tuple[list[dict], int]:
    """The scored rows of one task and its number of candidates."""
    if name == "icl":
        train = icl.read_trec(Path(data) / "train.txt")
        test = icl.select_test(icl.read_trec(Path(data) / "test.txt"), o.n_test, o.balance)
        samples = [
            s for seed in range(o.seeds) for s in icl.build_prompts(adapter, train, test, o.shots[0], seed)
        ]
    else:
        module = {"niah": needle, "kv": kv, "kv_recall": kv, "passkey": passkey, "vartrack": vartrack}[name]
        samples, _info = module.build(adapter, o, data)
    return scoring.score_samples(adapter, samples, "likelihood"), len(samples[0].candidates)


def negative_control(adapter, data: dict[str, str | None], names=TASKS) -> list[dict]:
    """The control table at the negative controls' settings (``control_options``)."""
    return control_table(adapter, data, control_options(), names)


def control_table(adapter, data: dict[str, str | None], options: dict, names=TASKS) -> list[dict]:
    """One row per task: accuracy, ci95, n, chance, calibrated (+ stderr), calibrated_distractors,
    specific (the true answer's gain minus the distractors', + stderr), and the scored rows;
    ``options`` maps a task (``TASKS``, or ``kv_recall``) to its options, ``data`` to its data."""
    out = []
    for name in names:
        rows, k = _task_rows(adapter, name, options[name], data.get(name.split("_")[0]))
        s = tasks.summarize(rows, k)["summary"]
        out.append(
            {
                "task": name,
                "accuracy": s["likelihood_accuracy"],
                "ci95": s["likelihood_accuracy_ci95"],
                "n": s["n"],
                "chance": 1.0 / k,
                "calibrated": s["calibrated"],
                "calibrated_stderr": s["calibrated_stderr"],
                "calibrated_distractors": s["calibrated_distractors"],
                "specific": s["calibrated_specific"],
                "specific_stderr": s["calibrated_specific_stderr"],
                "rows": rows,
            }
        )
    return out


def format_table(model: str, table: list[dict]) -> str:
    """The negative-control table as text, one line per task."""
    lines = [
        f"{model}:",
        f"  {'task':<10}{'accuracy':>9}  {'95% interval':<15}{'n':>5}{'chance':>8}  calibrated (nats)",
    ]
    for r in table:
        lines.append(
            f"  {r['task']:<10}{r['accuracy']:>9.3f}  [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] {r['n']:>5}"
            f"{r['chance']:>8.3f}  true {r['calibrated']:+.4f} +- {r['calibrated_stderr']:.4f}, "
            f"distractors {r['calibrated_distractors']:+.4f}, "
            f"specific {r['specific']:+.4f} +- {r['specific_stderr']:.4f}"
        )
    return "\n".join(lines)

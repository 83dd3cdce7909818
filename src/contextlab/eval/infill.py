"""Infilling evaluation (``contextlab eval infill``): exact match, true-middle likelihood, left-to-right loss.

On held-out code files (``infill_spans``) a single line or a block of lines is masked out
and the model is asked for it: with a FIM prompt in its training layout (PSM, SPM;
``infill``), and left to right from the prefix alone (``l2r``: the baseline of the FIM
paper and InCoder, and the only way to ask a model trained without FIM sentinels, which
then gets no PSM/SPM numbers: the result says so). Per span kind and mode:

* exact match of the greedy middle (Wilson 95% interval). Single-line: the generated text up
  to its first newline (or end-of-text / sentinel) equals the line. Multi-line: the text up
  to the model's own end-of-text / sentinel equals the block (``exact_match``), and, since a
  left-to-right model has no reason to stop, the first n generated lines equal the n lines
  (``exact_match_n_lines``: the number of lines is given to the model for free);
* the log-likelihood of the true middle given the prompt, per token and per byte (no end
  token is scored, so FIM and left-to-right prompts score the same tokens).

Exact match is that of greedy decoding. By default (``scoring=forced``) it is read off one
batched forward pass over prompt + true middle: greedy generation reproduces the middle iff
the argmax at every position along it is the true next token (and, for "ends itself", the
argmax after it is a stop id). For a byte tokenizer this is exactly the generation's result
(up to floating-point near-ties of the two top logits: the same positions are computed in a
longer sequence); with BPE a generation that spells the middle with other tokens is counted
a miss. ``check_generations`` spans per kind and mode are also generated with
``ModelAdapter.generate`` (greedy with a KV cache, in chunks of 16 tokens, stopping once exact
match is decided), shown in the result, and their agreement with the forced scores is reported;
``scoring=generate`` generates every span. Trade-off: forced scoring costs two forward passes
per span, where generation costs a prompt pass and one cached step per generated token (a new
prompt pass per chunk), so hundreds of spans fit on a CPU.

And the left-to-right loss of the same files (``ppl``'s disjoint windows at the model's
context), so one command gives both sides of "FIM for free".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.progress as progress
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput
from contextlab.eval.fim_prompt import MODES, cut_at_stop, fim_sentinels, infill_prompt
from contextlab.eval.infill_spans import Span, choose_spans, read_texts
from contextlab.eval.stats import proportion

CHUNK = 16  # tokens generated per call before exact match is checked
KINDS = ("single", "multi")
EXAMPLES = 5  # generations kept in the result per kind and mode


@dataclass
class Options:
    samples: int = opt(100, "spans per kind (single-line, multi-line)")
    modes: list[str] = opt(
        ["psm", "spm", "l2r"],
        "prompts: psm, spm (FIM models only; skipped for others, as the result says) and l2r "
        "(left to right from the prefix alone)",
    )
    split: Literal["run", "all"] = opt(
        "run",
        "run: the files the run held out for validation (on its own store, the default --data); all: "
        "every file of --data (a store or folder of held-out files)",
    )
    files: str = opt(
        "*.py",
        "with --data a folder: the glob of the files read (a name at any depth, as data ingest's --include; "
        "hidden, binary and linked-out files are left out as ingest leaves them, and named)",
    )
    encoding: Literal["strict", "replace", "skip", "latin-1"] = opt(
        "strict",
        "with --data a folder: bytes that are not UTF-8, as in data ingest: strict (stop, naming every such "
        "file), replace (U+FFFD), skip (the file), latin-1 (decode the file as Latin-1); all are counted",
    )
    max_lines: int = opt(8, "multi-line spans have 2..max_lines lines")
    max_middle_tokens: int = opt(
        0,
        "spans longer than this many tokens are not drawn; 0 = fitted to the context: 128, or a quarter of "
        "a context shorter than 512",
    )
    prefix_tokens: int = opt(0, "prefix tokens kept before the span; 0 = half of what the context leaves")
    suffix_tokens: int = opt(0, "suffix tokens kept after the span; 0 = half of what the context leaves")
    seed: int = opt(0, "seed of the span draw")
    scoring: Literal["forced", "generate"] = opt(
        "forced",
        "forced: greedy exact match read off one forward pass over prompt + true middle (greedy reproduces "
        "the middle iff every argmax along it is the true token; exact for byte tokenizers); generate: "
        "greedy generation (KV-cached) of every span (any tokenizer; a decoding per span, slower)",
    )
    check_generations: int = opt(
        5, "with scoring=forced: spans per kind and mode also generated, to show and to cross-check"
    )
    lm_loss: bool = opt(True, "also the left-to-right loss of the same files (disjoint context windows)")
    progress: bool = opt(
        True, "show a progress bar (on a terminal only; contextlab eval --no-progress turns it off too)"
    )


@dataclass
class Sample:
    prefix: list[int]
    suffix: list[int]
    middle: list[int]
    text: str  # the true middle
    n_lines: int


DEFAULT_MIDDLE = 128  # the longest middle drawn, in tokens, for a context of 512 or more


def middle_tokens(o: Options, context: int) -> int:
    """The longest middle drawn: --max-middle-tokens, or with 0 ``DEFAULT_MIDDLE`` capped at a quarter
    of the context (a context-128 model was refused by the default it could not hold)."""
    return o.max_middle_tokens or min(DEFAULT_MIDDLE, context // 4)


def _budget(o: Options, context: int) -> tuple[int, int]:
    """(prefix tokens, suffix tokens) that fit the context with the sentinels and the middle."""
    middle = middle_tokens(o, context)
    free = context - 3 - middle - CHUNK
    if free < 2:
        most = context - 3 - CHUNK - 2
        raise UserError(
            f"--max-middle-tokens {middle} leaves no room for a prefix and suffix in a context of {context}: "
            + (
                f"give at most {most} (or 0, fitted to the context)"
                if most > 0
                else "the context is too short"
            )
        )
    pre = o.prefix_tokens or free // 2
    suf = o.suffix_tokens or free - pre
    if pre + suf > free:
        raise UserError(f"prefix_tokens + suffix_tokens = {pre + suf} do not fit; at most {free} do")
    return pre, suf


def build_samples(adapter, texts: list[str], spans: list[Span], pre_n: int, suf_n: int) -> list[Sample]:
    out = []
    for s in spans:
        t = texts[s.doc]
        pre = adapter.encode(t[max(0, s.start - 16 * pre_n) : s.start])[-pre_n:]
        suf = adapter.encode(t[s.end : s.end + 16 * suf_n])[:suf_n]
        out.append(Sample(pre, suf, adapter.encode(t[s.start : s.end]), t[s.start : s.end], s.n_lines))
    return out


def available_modes(adapter, modes: list[str]):
    """(the modes to run, the FIM sentinels or None, a note when FIM modes were skipped)."""
    bad = [m for m in modes if m not in (*MODES, "l2r")]
    if bad or not modes:
        raise UserError(f"modes must be among psm, spm, l2r; got {modes}")
    if not any(m in MODES for m in modes):
        return list(modes), None, ""
    if adapter.info.objective != "fim" and "l2r" in modes:
        asked = "/".join(m for m in modes if m in MODES)
        note = f"objective {adapter.info.objective} has no FIM sentinels: {asked} not run, l2r only"
        return ["l2r"], None, note
    return list(modes), fim_sentinels(adapter), ""  # refuses a model without sentinels


def prompt_for(sample: Sample, mode: str, sentinels) -> list[int]:
    return (
        list(sample.prefix) if mode == "l2r" else infill_prompt(sample.prefix, sample.suffix, mode, sentinels)
    )


def generate_middle(
    adapter, prompt: list[int], target: str, single: bool, stops, cap: int
) -> tuple[str, bool]:
    """(the generated middle text, whether the model ended it itself); see the module docstring."""
    out: list[int] = []
    while len(out) < cap:
        step = min(CHUNK, cap - len(out))
        new = adapter.generate(prompt + out, step, stop=stops)
        out += new
        stopped = len(new) < step  # generate met a stop id
        text = adapter.tokenizer.decode(out)
        if single and "\n" in text:
            return text[: text.index("\n") + 1], True
        if stopped or not target.startswith(text.rstrip("\ufffd")) or len(text) > len(target):
            return text, stopped
    return adapter.tokenizer.decode(cut_at_stop(out, stops)[0]), False


def score_generation(text: str, ended: bool, sample: Sample, single: bool) -> tuple[bool, bool]:
    """(exact match, exact match of the first n lines) of one generated middle."""
    if single:
        ok = (ended or text.endswith("\n")) and text.removesuffix("\n") == sample.text.removesuffix("\n")
        return ok, ok
    first_n = "".join(text.splitlines(keepends=True)[: sample.n_lines])
    return ended and text == sample.text, first_n == sample.text


def greedy_predictions(adapter, items: list[tuple[list[int], list[int]]]) -> list[np.ndarray]:
    """For each (prompt, middle): the greedy (argmax) token at the len(middle) + 1 positions that predict
    the middle's tokens and the one after it, with the true middle fed in (batched, right-padded)."""
    order = sorted(range(len(items)), key=lambda i: -(len(items[i][0]) + len(items[i][1])))
    out: list[np.ndarray] = [np.zeros(0)] * len(items)
    for a in range(0, len(order), adapter.batch_size):
        batch = [items[i] for i in order[a : a + adapter.batch_size]]
        idx = np.zeros((len(batch), max(len(p) + len(m) for p, m in batch)), np.int64)
        for r, (p, m) in enumerate(batch):
            idx[r, : len(p) + len(m)] = p + m
        pred = adapter.logits(idx).argmax(-1).cpu().numpy()  # (b, T): greedy next token at every position
        for r, (p, m) in enumerate(batch):
            out[order[a + r]] = pred[r, len(p) - 1 : len(p) + len(m)]
    return out


def forced_match(pred: np.ndarray, middle: list[int], stops, single: bool) -> tuple[bool, bool]:
    """(exact match, exact match of the first n lines) of greedy decoding, from its predictions along the
    true middle: greedy reproduces the middle iff every prediction is the true next token."""
    m = len(middle)
    k = next((i for i in range(m) if pred[i] != middle[i]), m)  # tokens greedy gets right in a row
    if single:  # the line, then its newline or the model's own end
        ok = k == m or (k == m - 1 and int(pred[m - 1]) in stops)
        return ok, ok
    return k == m and int(pred[m]) in stops, k == m


def run_mode(adapter, samples: list[Sample], mode: str, sentinels, single: bool, o, bar) -> dict:
    """Per-sample arrays of one kind and mode: log-likelihood, exact matches; and a few generations."""
    stops = tuple(sentinels.stops) if sentinels else _eot(adapter)
    prompts = [prompt_for(s, mode, sentinels) for s in samples]
    ll = adapter.score_spans([(p + s.middle, len(p)) for p, s in zip(prompts, samples)])
    if o.scoring == "forced":
        preds = greedy_predictions(adapter, [(p, s.middle) for p, s in zip(prompts, samples)])
        em, em_lines = zip(*[forced_match(q, s.middle, stops, single) for q, s in zip(preds, samples)])
    n_gen = len(samples) if o.scoring == "generate" else min(o.check_generations, len(samples))
    generated, examples = [], []
    for p, s in zip(prompts[:n_gen], samples):
        cap = min(2 * len(s.middle) + CHUNK, adapter.context - len(p))
        text, ended = generate_middle(adapter, p, s.text, single, stops, cap)
        generated.append(score_generation(text, ended, s, single))
        examples.append({"middle": s.text, "generated": text, "exact_match": generated[-1][0]})
        bar.update()
    if o.scoring == "generate":
        em, em_lines = zip(*generated) if generated else ((), ())
    else:
        bar.update(len(samples) - n_gen)
    agree = sum(g == (a, b) for g, a, b in zip(generated, em, em_lines))
    check = {"generated": n_gen, "agree": agree}
    return {"ll": ll, "em": np.array(em, bool), "em_lines": np.array(em_lines, bool), "check": check} | {
        "examples": examples[:EXAMPLES]
    }


class _NoBar:
    """What ``run_mode`` updates when --progress false: nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _eot(adapter) -> tuple[int, ...]:
    eot = (adapter.info.tokenizer or adapter.tokenizer.spec()).get("eot_id")
    return () if eot is None else (int(eot),)


def _summarize(kind: str, r: dict, samples: list[Sample]) -> dict:
    tokens = sum(len(s.middle) for s in samples)
    n_bytes = sum(len(s.text.encode("utf-8")) for s in samples)
    nll = -float(np.sum(r["ll"]))
    out = {
        "exact_match": proportion(r["em"]),
        "nll_per_token": nll / tokens,
        "bits_per_byte": nll / math.log(2) / n_bytes,
        "examples": r["examples"],
        "generation_check": r["check"],  # generated spans, and how many agree with the forced scores
    }
    if kind == "multi":
        out["exact_match_n_lines"] = proportion(r["em_lines"])
    return out


def lm_loss(adapter, texts: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
    """Left-to-right loss of the files (``ppl``'s disjoint windows at the model's context)."""
    from contextlab.eval.ppl import document_losses

    docs = [np.asarray(adapter.encode(t), dtype=np.int64) for t in texts]
    docs = [d for d in docs if len(d) >= 2]
    losses = document_losses(adapter, docs, adapter.context, adapter.context, desc="infill: l2r loss")
    flat = np.concatenate(losses)
    n_bytes = sum(len(adapter.tokenizer.decode(d[1:]).encode("utf-8")) for d in docs)
    nll = float(flat.astype(np.float64).sum())
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in losses])]).astype(np.int64)
    summary = {"loss": nll / len(flat), "bits_per_byte": nll / math.log(2) / n_bytes, "tokens": len(flat)}
    return summary, {"lm_token_losses": flat, "lm_doc_offsets": offsets}


def run_kind(adapter, texts, spans: list[Span], kind: str, modes, sentinels, o: Options, bar):
    """(result, arrays, summary scalars) of one span kind over every mode."""
    samples = build_samples(adapter, texts, spans, *_budget(o, adapter.context))
    arrays = {
        f"doc_{kind}": np.array([s.doc for s in spans], np.int64),
        f"start_{kind}": np.array([s.start for s in spans], np.int64),
        f"tokens_{kind}": np.array([len(s.middle) for s in samples], np.int64),
        f"bytes_{kind}": np.array([len(s.text.encode("utf-8")) for s in samples], np.int64),
    }
    result, summary = {"n": len(samples), "modes": {}}, {}
    for mode in modes if samples else ():
        r = run_mode(adapter, samples, mode, sentinels, kind == "single", o, bar)
        arrays |= {f"ll_{kind}_{mode}": r["ll"], f"correct_{kind}_{mode}": r["em"].astype(np.int8)}
        res = result["modes"][mode] = _summarize(kind, r, samples)
        summary[f"{kind}_{mode}_exact_match"] = res["exact_match"]["accuracy"]
        if kind == "multi":
            arrays[f"correct_lines_{kind}_{mode}"] = r["em_lines"].astype(np.int8)
            summary[f"{kind}_{mode}_exact_match_n_lines"] = res["exact_match_n_lines"]["accuracy"]
        summary[f"{kind}_{mode}_nll_per_token"] = res["nll_per_token"]
    return result, arrays, summary


def _left_out(described: dict) -> str:
    """'pkg/bin.py (binary ...), other/out.py (symlink out of the tree)': what a folder's read left out."""
    from contextlab.errors import some

    left = described.get("left_out") or []
    return some([f"{e['path']} ({e['reason']})" for e in left]) if left else ""


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    o = options
    modes, sentinels, note = available_modes(adapter, list(o.modes))
    texts, described = read_texts(data, adapter, o.split, o.files, o.encoding)
    left_out = _left_out(described)
    budget = _budget(o, adapter.context)
    middle = middle_tokens(o, adapter.context)
    plan = {
        k: choose_spans(texts, adapter.encode, o.samples, k == "multi", o.max_lines, middle, o.seed)
        for k in KINDS
    }
    n_spans = {k: len(v) for k, v in plan.items()}
    short = [
        f"{k}-line: {n} span{'s' * (n != 1)} of the {o.samples} asked (the files hold no more "
        + ("lines" if k == "single" else f"blocks of 2-{o.max_lines} lines")
        + f" of at most {middle} tokens): its numbers rest on {n}"
        for k, n in n_spans.items()
        if n < o.samples
    ]
    progress.announce(
        "infill",
        {
            "spans": ", ".join(f"{n} {k}-line" for k, n in n_spans.items()),
            "modes": modes if not note else f"{', '.join(modes)} ({note})",
            "prefix tokens": budget[0],
            "suffix tokens": budget[1],
            "scoring": o.scoring,
            "files": len(texts),
            "left out": left_out,
            "data": described.get("store") or described.get("folder") or data,
        },
    )
    total = sum(n_spans.values()) * len(modes)
    bar = progress.bar(total=total, desc="infill", unit="span") if o.progress else _NoBar()
    kinds, arrays, summary = {}, {}, {}
    for kind, spans in plan.items():
        kinds[kind], a, s = run_kind(adapter, texts, spans, kind, modes, sentinels, o, bar)
        arrays |= a
        summary |= s
    bar.close()
    summary |= {f"{k}_spans": n for k, n in n_spans.items()}  # beside the rates they are of
    results = {"summary": summary, "modes": modes, "note": note, "prefix_tokens": budget[0]}
    said = ([f"note: {note}"] if note else []) + [f"note: {line}" for line in short]
    if left_out:
        said.append(f"note: files of the folder left out, as data ingest leaves them: {left_out}")
    if said:  # printed under the summary too: the settings line is minutes above it
        results["text"] = said
    results |= {"suffix_tokens": budget[1], "max_middle_tokens": middle, "kinds": kinds}
    if o.lm_loss:
        lm, lm_arrays = lm_loss(adapter, texts)
        summary |= {"lm_loss": lm["loss"], "lm_bits_per_byte": lm["bits_per_byte"]}
        results["lm"] = lm
        arrays |= lm_arrays
    return EvalOutput(results, {**described, "n_files": len(texts)}, arrays=arrays, plot=None)

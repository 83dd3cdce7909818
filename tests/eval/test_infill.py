"""Infilling: prompts in the exact training layout of objectives/fim.py, spans at line boundaries,
exact match and likelihood on cases whose answer is known, the left-to-right path of a model
without sentinels, and `contextlab eval infill` on tiny FIM and CLM runs."""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pytest

from contextlab.cli import main as cli
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.data.views import split_documents
from contextlab.errors import UserError
from contextlab.eval.adapter import in_memory_adapter
from contextlab.eval.fim_prompt import Sentinels, fim_sentinels, infill, infill_prompt
from contextlab.eval.infill import Options, Sample, available_modes, generate_middle, run_mode
from contextlab.eval.infill_spans import choose_spans
from contextlab.eval.stats import wilson
from contextlab.inference import ModelInfo
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.objectives.fim import FIM, MID, PRE, SUF, fim_document
from contextlab.train.trainer import train
from tests.objectives.test_training import config

CODE = [
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
    "class Box:\n    def __init__(self):\n        self.items = []\n\n    def put(self, x):\n"
    "        self.items.append(x)\n",
    "import os\n\nfor name in os.listdir('.'):\n    if name.endswith('.py'):\n        print(name)\n",
]


def fim_adapter(objective: str = "fim", seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=260, n_layer=1, n_head=2, n_embd=32, context=96)).eval()
    adapter = in_memory_adapter(model, ByteTokenizer(), "tiny-fim")
    adapter.info.objective = objective
    return adapter


@pytest.mark.parametrize("spm", [False, True])
def test_the_prompt_is_the_training_layout_token_for_token(spm):
    objective = FIM(FIM.Options())
    objective.bind_tokenizer(ByteTokenizer().spec())
    pre, suf, mid = (objective.special_ids[n] for n in (PRE, SUF, MID))
    sentinels = fim_sentinels(fim_adapter())
    assert (sentinels.prefix, sentinels.suffix, sentinels.middle, sentinels.eot) == (pre, suf, mid, 256)
    prefix, middle, suffix = list(b"def f(x):\n"), list(b"    y = x\n"), list(b"    return y\n")
    doc = prefix + middle + suffix + [7, 7, 7]  # training drops a document's last 3 tokens
    trained = fim_document(doc, len(prefix), len(prefix) + len(middle), spm, pre, suf, mid)
    prompt = infill_prompt(prefix, suffix, "spm" if spm else "psm", sentinels)
    assert trained == prompt + middle


def test_a_model_without_sentinels_is_refused_in_one_line():
    clm = fim_adapter("clm")
    with pytest.raises(UserError, match="objective clm, not fim: it has no infilling sentinels") as e:
        infill(clm, "a = ", "\n", "psm", 4)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="no infilling sentinels"):
        available_modes(clm, ["psm", "spm"])
    assert available_modes(clm, ["psm", "l2r"])[0] == ["l2r"]  # a CLM model is asked left to right
    small = in_memory_adapter(
        GPT(GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32)), ByteTokenizer(), "s"
    )
    small.info.objective = "fim"
    with pytest.raises(UserError, match="has 257 token ids but its FIM sentinels need 260"):
        fim_sentinels(small)


def test_infill_generates_from_the_fim_prompt_and_stops_at_a_sentinel():
    adapter = fim_adapter()
    s = fim_sentinels(adapter)
    expected = adapter.generate(infill_prompt(list(b"x = ("), list(b")\n"), "spm", s), 6, stop=s.stops)
    assert infill(adapter, "x = (", ")\n", "spm", 6) == ByteTokenizer().decode(expected)


@pytest.mark.parametrize("multi", [False, True])
def test_spans_are_whole_lines_and_deterministic_by_seed(multi):
    encode = ByteTokenizer().encode
    spans = choose_spans(CODE, encode, 6, multi, 3, 200, seed=1)
    assert len(spans) == 6 and len(set(spans)) == 6
    for sp in spans:
        text = CODE[sp.doc]
        middle = text[sp.start : sp.end]
        assert sp.start > 0 and text[sp.start - 1] == "\n"  # a prefix of whole lines
        assert sp.end == len(text) or text[sp.end - 1] == "\n"
        assert len(middle.splitlines()) == sp.n_lines and middle.strip()
        assert (2 <= sp.n_lines <= 3) if multi else sp.n_lines == 1
    assert choose_spans(CODE, encode, 6, multi, 3, 200, seed=1) == spans
    assert choose_spans(CODE, encode, 6, multi, 3, 200, seed=2) != spans
    assert all(
        len(encode(CODE[s.doc][s.start : s.end])) <= 12
        for s in choose_spans(CODE, encode, 4, multi, 3, 12, 0)
    )


class ScriptedAdapter:
    """A stand-in adapter whose generation and scores are fixed: generate continues a registered
    prompt with its scripted reply (cut at a stop id), score_spans gives -1 nat per scored token."""

    def __init__(self, replies: dict[tuple, list[int]], objective: str = "fim"):
        self.replies, self.tokenizer, self.context = replies, ByteTokenizer(), 512
        self.info = ModelInfo("scripted", "contextlab", "-", "-", 0, 512, True, ByteTokenizer().spec())
        self.info.objective = objective
        self.vocab_size = 260

    def generate(self, ids, n, stop=()):
        prompt = next(p for p in self.replies if tuple(ids[: len(p)]) == p)
        done = len(ids) - len(prompt)
        out = []
        for t in self.replies[prompt][done : done + n]:
            if t in stop:
                break
            out.append(t)
        return out

    def score_spans(self, items):
        return np.array([-(len(ids) - start) for ids, start in items], dtype=float)


def scripted_case(reply: bytes, eot: bool, multi: bool):
    s = Sentinels(257, 258, 259, 256)
    text = "    y = x\n    z = y\n" if multi else "    y = x\n"
    sample = Sample(list(b"def f(x):\n"), list(b"    return z\n"), list(text.encode()), text, 1 + multi)
    prompt = tuple(infill_prompt(sample.prefix, sample.suffix, "psm", s))
    replies = {prompt: list(reply) + ([256] if eot else []) + list(b"pass\n") * 20}
    return ScriptedAdapter(replies), sample, s


class Bar:
    def update(self, n: int = 1):
        pass


@pytest.mark.parametrize(
    "reply,eot,multi,em,em_lines",
    [
        (b"    y = x\n", False, False, True, True),  # single line: up to the first newline
        (b"    y = x", True, False, True, True),  # ... or the model's own end
        (b"    y = 1\n", True, False, False, False),
        (b"    y = x\n    z = y\n", True, True, True, True),
        (b"    y = x\n    z = y\n", False, True, False, True),  # right lines, but no end: n-lines only
        (b"    y = x\n", True, True, False, False),
    ],
)
def test_exact_match_and_likelihood_on_scripted_answers(reply, eot, multi, em, em_lines):
    adapter, sample, s = scripted_case(reply, eot, multi)
    r = run_mode(adapter, [sample], "psm", s, not multi, Options(scoring="generate"), Bar())
    assert r["em"].tolist() == [em] and r["em_lines"].tolist() == [em_lines]
    assert r["ll"].tolist() == [-len(sample.middle)]  # -1 nat per token of the true middle


def test_early_stopping_decides_exact_match_as_a_full_generation_would():
    adapter, tok = fim_adapter(seed=3), ByteTokenizer()
    s = fim_sentinels(adapter)
    prompt = infill_prompt(list(b"def f(x):\n"), list(b"    return y\n"), "psm", s)
    ids = adapter.generate(prompt, 40, stop=s.stops)
    full, full_ended = tok.decode(ids), len(ids) < 40
    for target in [full, tok.decode(ids[:5]), tok.decode(ids[:20]) + "q", "    y = x\n"]:
        text, ended = generate_middle(adapter, prompt, target, False, s.stops, 40)
        assert (text == target and ended) == (full == target and full_ended)
        assert full.startswith(text.rstrip("\ufffd"))


def successor_adapter(pairs: dict[str, int]):
    """A GPT whose greedy next token depends only on the current one (one-hot embeddings, blocks that
    add nothing, lm_head mapping each token to its successor in ``pairs``)."""
    import torch

    cfg = GPTConfig(vocab_size=260, n_layer=1, n_head=2, n_embd=264, context=128, tie_embeddings=False)
    model = GPT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_() if p.dim() == 2 else p.fill_(1.0)  # blocks add nothing; norms are plain
        model.wte.weight[range(260), range(260)] = 1.0
        for a, b in pairs.items():
            model.lm_head.weight[b, ord(a) if isinstance(a, str) else a] = 10.0
    adapter = in_memory_adapter(model, ByteTokenizer(), "successor")
    adapter.info.objective = "fim"
    return adapter


@pytest.mark.parametrize("single", [True, False])
def test_forced_exact_match_equals_greedy_generation(single):
    # greedy writes "ab" after a newline or the middle sentinel, then ends (single) or goes on "\nab\nab..."
    pairs = {"\n": ord("a"), 259: ord("a"), "a": ord("b"), "b": 256 if single else ord("\n")}
    adapter = successor_adapter(pairs)
    s = fim_sentinels(adapter)
    if single:
        middles, em, em_lines = ["ab\n", "ac\n", "b\n", "abc\n"], [True, False, False, False], None
    else:
        middles, em, em_lines = ["ab\nab\n", "ab\nac\n", "b\nab\n", "ab\nab\nab\n"], [False] * 4, [1, 0, 0, 1]
    samples = [Sample(list(b"q = 1\n"), list(b"z\n"), list(m.encode()), m, m.count("\n")) for m in middles]
    for mode in ("psm", "spm", "l2r"):
        forced = run_mode(adapter, samples, mode, s, single, Options(check_generations=len(samples)), Bar())
        generated = run_mode(adapter, samples, mode, s, single, Options(scoring="generate"), Bar())
        assert forced["check"] == {"generated": len(samples), "agree": len(samples)}
        assert forced["em"].tolist() == generated["em"].tolist() == em
        assert forced["em_lines"].tolist() == generated["em_lines"].tolist() == (em_lines or em)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("infill_runs")
    src = root / "code"
    src.mkdir()
    for i in range(8):
        lines = [f"def f{j}(a):\n  b = a + {i}\n  return b\n\n" for j in range(12)]
        (src / f"m{i}.py").write_text("".join(lines))
    store = ingest(src, root / "store", IngestConfig(), progress=False).store
    data = {"val_split": "documents", "val_fraction": 0.25}
    for name in ("fim", "clm"):
        cfg = config(store, root / name, name, {}, **data)
        cfg.train.context = 128
        train(cfg)
    return root, store


def eval_infill(root, store, name, out, *extra):
    args = ["eval", "infill", "--model", str(root / name), "--data", str(store.path), "--out", str(out)]
    assert cli(args + ["--samples", "3", "--max-middle-tokens", "40", "--progress", "false", *extra]) == 0
    return json.loads((out / "infill.json").read_text())


def test_contextlab_eval_infill_on_a_fim_and_a_clm_run(runs, tmp_path, capsys):
    root, store = runs
    res = eval_infill(root, store, "fim", tmp_path / "fim")
    _, val = split_documents(store, 0.25, 0)
    assert res["data"]["docs"] == np.asarray(val.indices).tolist()  # exactly the files the run held out
    r = res["results"]
    assert r["modes"] == ["psm", "spm", "l2r"] and not r["note"]
    for kind in ("single", "multi"):
        for mode in r["modes"]:
            got = r["kinds"][kind]["modes"][mode]
            correct = np.load(tmp_path / "fim" / res["arrays"][f"correct_{kind}_{mode}"])
            assert got["exact_match"]["n"] == len(correct) == 3
            assert got["exact_match"]["ci95"] == pytest.approx(list(wilson(float(correct.sum()), 3)))
            ll = np.load(tmp_path / "fim" / res["arrays"][f"ll_{kind}_{mode}"])
            tokens = np.load(tmp_path / "fim" / res["arrays"][f"tokens_{kind}"])
            assert math.isclose(got["nll_per_token"], -ll.sum() / tokens.sum(), rel_tol=1e-9)
    assert r["summary"]["lm_loss"] > 0 and r["lm"]["tokens"] > 0
    capsys.readouterr()
    clm = eval_infill(root, store, "clm", tmp_path / "clm")["results"]
    assert clm["modes"] == ["l2r"] and "no FIM sentinels" in clm["note"]
    # the modes asked for and not run are printed, on the settings line and under the summary (they were
    # in the JSON only: a user's --modes psm,spm,l2r printed `modes l2r`)
    said = capsys.readouterr()
    note = "objective clm has no FIM sentinels: psm/spm not run, l2r only"
    assert f"  note: {note}" in said.out.splitlines() and note in said.out + said.err
    assert clm["kinds"]["single"]["n"] == 3 and "single_psm_exact_match" not in clm["summary"]


def test_contextlab_generate_infills_with_a_fim_run_and_refuses_otherwise(runs, capsys):
    from contextlab.eval import load_model

    root, _store = runs
    prefix, suffix = "def f3(a):\n", "  return b\n"
    for mode in ("psm", "spm"):
        args = [
            "generate",
            "--model",
            str(root / "fim"),
            "--infill-prefix",
            prefix,
            "--infill-suffix",
            suffix,
        ]
        assert cli(args + ["--infill-mode", mode, "--max-new-tokens", "12"]) == 0
        expected = infill(load_model(root / "fim"), prefix, suffix, mode, 12)
        assert capsys.readouterr().out == expected + "\n"
    bad = [
        (["--model", str(root / "clm"), "--infill-prefix", "a", "--infill-suffix", "b"], "not fim"),
        (["--model", str(root / "fim"), "--infill-prefix", "a"], "needs both"),
        (
            ["--model", str(root / "fim"), "--prompt", "a", "--infill-prefix", "a", "--infill-suffix", "b"],
            "one of",
        ),
        (
            [
                "--model",
                str(root / "fim"),
                "--infill-prefix",
                "a",
                "--infill-suffix",
                "b",
                "--temperature",
                "1",
            ],
            "greedy",
        ),
    ]
    for argv, words in bad:
        assert cli(["generate", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err


def test_compare_pairs_a_fim_and_a_clm_run_span_by_span(runs, tmp_path):
    from contextlab.compare.infill import mode_pairs
    from contextlab.compare.paired import Options, compare_runs
    from contextlab.eval.paired_stats import cluster_t, per_cluster

    root, store = runs
    eval_infill(root, store, "fim", tmp_path / "fim")
    eval_infill(root, store, "clm", tmp_path / "clm")
    _, (doc,) = compare_runs(tmp_path / "fim", tmp_path / "clm", ["infill"], Options(resamples=200), None)
    pairs = doc["results"]["pairs"]
    assert mode_pairs(["psm", "spm", "l2r"], ["l2r"]) == [("l2r", "l2r"), ("psm", "l2r"), ("spm", "l2r")]
    assert [(p["kind"], p["mode_a"], p["mode_b"]) for p in pairs] == [
        (k, a, "l2r") for k in ("single", "multi") for a in ("l2r", "psm", "spm")
    ]
    load = lambda side, key: np.load(tmp_path / side / f"infill.{key}.npy")
    for p in pairs:
        k = p["kind"]
        docs, tokens = load("fim", f"doc_{k}"), load("fim", f"tokens_{k}")
        d = load("clm", f"ll_{k}_l2r") - load("fim", f"ll_{k}_{p['mode_a']}")  # nll A - nll B per span
        ref = cluster_t(per_cluster(d, docs)[0], per_cluster(tokens.astype(float), docs)[0])
        assert p["loss"]["diff"] == pytest.approx(ref["diff"]) and p["loss"]["interval95"] == pytest.approx(
            ref["interval95"]
        )
        em = load("fim", f"correct_{k}_{p['mode_a']}").mean() - load("clm", f"correct_{k}_l2r").mean()
        assert p["exact_match"]["diff"] == pytest.approx(em)
    lm = load("fim", "lm_token_losses").astype(float) - load("clm", "lm_token_losses")
    assert doc["results"]["lm"]["diff"] == pytest.approx(lm.mean())


def test_the_default_middle_fits_a_short_context_and_too_few_spans_are_said(runs, tmp_path, capsys):
    """A context-128 model was refused by infill's default (max_middle_tokens 128: "leaves no room",
    naming no flag), and a kind that found 4 of the 30 spans asked gave its rates with no word of it;
    the report showed the rates bare, without their n or intervals."""
    from contextlab.report.html import build_report

    root, store = runs
    args = ["eval", "infill", "--model", str(root / "fim"), "--data", str(store.path), "--progress", "false"]
    assert cli([*args, "--samples", "200", "--check-generations", "1", "--out", str(tmp_path / "d")]) == 0
    r = json.loads((tmp_path / "d" / "infill.json").read_text())["results"]
    assert r["max_middle_tokens"] == 32  # a quarter of the context
    n = {k: r["kinds"][k]["n"] for k in ("single", "multi")}
    assert r["summary"]["single_spans"] == n["single"] and r["summary"]["multi_spans"] == n["multi"]
    assert 0 < n["multi"] < 200
    said = (
        f"note: multi-line: {n['multi']} spans of the 200 asked (the files hold no more blocks of 2-8 lines"
    )
    assert any(line.startswith(said) for line in r["text"])
    out = capsys.readouterr().out
    assert said in out
    page = html.unescape(re.sub(r"<[^>]+>", " ", build_report(tmp_path / "d").read_text()))
    assert "per span kind and mode" in page and re.search(r"multi-line\s+psm\s+" + str(n["multi"]), page)
    em = r["kinds"]["multi"]["modes"]["psm"]["exact_match"]
    from contextlab.report.blocks import with_interval

    assert with_interval(em["accuracy"], em["ci95"]) in page
    assert cli([*args, "--max-middle-tokens", "120", "--out", str(tmp_path / "e")]) != 0  # names the flag
    err = capsys.readouterr().err
    assert (
        "--max-middle-tokens 120 leaves no room for a prefix and suffix in a context of 128: give at most 107"
        in err
    )


def test_a_folder_of_code_is_read_as_data_ingest_reads_it(tmp_path, capsys):
    """`eval infill --split all --data FOLDER` read every rglob match with U+FFFD for bad bytes: a `.git/`
    hook, a link to /etc/passwd, a link duplicating a file, a binary file and a Latin-1 file were all
    infilled and in its left-to-right loss, and the result said only `files 13`. The folder is read as
    data ingest reads it: those files are left out and named; bytes that are not UTF-8 stop the
    evaluation unless --encoding says otherwise."""
    import os

    from contextlab.eval.infill import run
    from contextlab.eval.infill_spans import read_folder

    code = tmp_path / "code"
    for d in ("pkg", ".git", "other"):
        (code / d).mkdir(parents=True)
    (code / "pkg" / "a.py").write_text("".join(CODE))
    (code / ".git" / "hook.py").write_text("print('hook')\n" * 20)
    (code / "pkg" / "bin.py").write_bytes(b"x = 1\n\x00\x01\n" * 10)
    (code / "pkg" / "latin.py").write_bytes(b"# caf\xe9\nx = 1\ny = 2\n" * 5)
    outside = tmp_path / "passwd.py"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n" * 5)
    os.symlink(outside, code / "other" / "out.py")
    os.symlink(code / "pkg" / "a.py", code / "other" / "link.py")
    with pytest.raises(
        UserError, match=r"is not valid UTF-8: pkg/latin\.py .*no span was drawn: pass --encoding"
    ):
        read_folder(code, "*.py", "strict")
    texts, read = read_folder(code, "*.py", "skip")
    assert texts == ["".join(CODE)] and read["read"] == ["pkg/a.py"] and read["files"] == 1
    reasons = {e["path"]: e["reason"] for e in read["left_out"]}
    assert set(reasons) == {"other/link.py", "other/out.py", "pkg/bin.py", "pkg/latin.py"}
    assert reasons["other/out.py"] == "symlink out of the tree" and reasons["pkg/bin.py"].startswith("binary")
    texts, read = read_folder(code, "*.py", "latin-1")
    assert read["read"] == ["pkg/a.py", "pkg/latin.py"] and "# café\n" in texts[1]
    o = Options(split="all", samples=2, encoding="skip", check_generations=0, max_middle_tokens=40)
    out = run(fim_adapter(), o, str(code))
    assert out.data["read"] == ["pkg/a.py"] and out.results["summary"]["single_spans"] == 2
    said = capsys.readouterr().out
    assert "left out other/link.py (duplicate of pkg/a.py (a symlink to it))" in said
    assert any(
        t.startswith("note: files of the folder left out, as data ingest leaves them")
        for t in out.results["text"]
    )

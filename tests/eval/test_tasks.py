"""Prompt tasks: needle placement, key-value prompts, candidate scoring, passkey/vartrack/ICL runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.errors import UserError
from contextlab.eval import icl, kv, needle, passkey, scoring, stats, tasks, vartrack, visible
from tests.conftest import KV_75, TREC
from tests.eval.conftest import byte_adapter, tiny_gpt

HAY = " ".join(f"Sentence number {i} says something about item {i * 7}." for i in range(200))


@pytest.mark.parametrize("depth", [0, 10, 33, 50, 77, 100])
def test_needle_goes_in_at_the_requested_depth_within_one_sentence(depth):
    target = int(depth / 100 * len(HAY))
    text, at = needle.insert_needle(HAY, needle.NEEDLE, target)
    assert text.count(needle.NEEDLE) == 1
    assert text.index(needle.NEEDLE) == (at + 1 if at else 0)
    if at:  # right after a sentence end, and no other sentence end between it and the target
        assert HAY[:at].endswith(".") and HAY[at] == " "
        assert not needle.sentence_boundaries(HAY[at : target + 1])[:-1] or HAY[at:target].count(". ") == 0
    assert at <= target and len(HAY[at:target].split(". ")) <= 2  # within one sentence
    assert text.replace(" " + needle.NEEDLE, "", 1) == HAY or at == 0


def test_needle_prompt_has_the_needle_at_depth_in_the_model_tokens(tmp_path):
    (tmp_path / "a.txt").write_text(HAY)
    adapter = byte_adapter(tiny_gpt())
    o = needle.Options()
    for depth in (0.0, 50.0, 100.0):
        for value in o.answers:
            ids, control, meta = needle.build_prompt(adapter, HAY, 600, depth, o, value)
            text = adapter.tokenizer.decode(ids)
            sentence = needle.needle_sentence(o, value)
            assert len(ids) <= 600 and text.count(sentence) == 1 and text.count(o.answer_prefix) == 2
            assert text.endswith("Answer: " + o.answer_prefix)
            assert abs(meta["depth_tokens"] - depth / 100) < 0.12  # a sentence is ~50 of ~450 haystack bytes
            assert meta["target_char"] - meta["insert_char"] < 60
            # the control is the same prompt without the needle sentence (and its separating space)
            assert adapter.tokenizer.decode(control) == text.replace(" " + sentence, "", 1).replace(
                sentence + " ", "", 1
            )
    assert needle.needle_sentence(o, o.answers[0]) == needle.NEEDLE


def test_needle_asks_each_haystack_once_with_every_value_of_the_pool(tmp_path):
    (tmp_path / "a.txt").write_text(HAY)
    adapter = byte_adapter(tiny_gpt(context=512))
    o = needle.Options(lengths=[400], depths=[0.0, 50.0], samples=2)
    samples, _ = needle.build(adapter, o, str(tmp_path))
    k = len(o.answers)
    assert len(samples) == 2 * 2 * k
    for g in range(4):
        members = samples[g * k : (g + 1) * k]
        assert {s.group for s in members} == {g}
        assert [s.answer for s in members] == o.answers  # every value is the truth once
        assert all(
            sorted(map(tuple, s.candidates)) == sorted(map(tuple, members[0].candidates)) for s in members
        )
        assert all(s.control == members[0].control for s in members)  # one haystack per set
        for s in members:
            assert adapter.tokenizer.decode(s.candidates[0]) == " " + s.answer


def test_kv_prompt_holds_every_pair_exactly_once():
    rows = kv.read_examples(KV_75)
    ex = rows[0]
    records = [tuple(r) for r in ex["ordered_kv_records"]]
    gold = next(i for i, (k, _) in enumerate(records) if k == ex["key"])
    for pos in (0, 37, 74):
        placed = kv.place_gold(records, gold, pos)
        text = kv.kv_prompt(placed, ex["key"])
        assert placed[pos][0] == ex["key"] and sorted(placed) == sorted(records)
        for k, v in records:
            assert text.count(f'"{k}": "{v}"') == 1 and text.count(v) == 1
        assert text.count(ex["key"]) == 2  # in the object and in the question
        body = text[text.index("{") : text.rindex("}") + 1]
        assert list(json.loads(body).items()) == placed


def test_kv_build_with_fewer_pairs_keeps_the_gold_pair():
    adapter = byte_adapter(tiny_gpt(context=4096))
    path = str(KV_75)
    samples, info = kv.build(adapter, kv.Options(n_examples=2, n_pairs=6), path)
    assert info["positions"] == [0, 1, 2, 4, 5] and len(samples) == 2 * 5 * 5  # examples x positions x keys
    files = kv.read_examples(KV_75)
    for s in samples:
        text = adapter.tokenizer.decode(s.prompt)
        body = json.loads(text[text.index("{") : text.rindex("}") + 1])
        assert len(body) == 6 and list(body.values())[s.cell[0]] == s.answer
        assert adapter.tokenizer.decode(s.candidates[0]) == f' "{s.answer}"'
        key = text[text.rindex('Key: "') + 6 :].split('"')[0]
        assert body[key] == s.answer and list(body)[s.cell[0]] == key  # the queried pair sits at the position
        control = adapter.tokenizer.decode(s.control)
        assert key not in control[: control.rindex("Key:")] and control.count(s.answer) == 0
    for g in range(10):  # each set: every key queried once, the same candidates, the file's key in set 0
        members = [s for s in samples if s.group == g]
        assert len(members) == 5 and len({s.answer for s in members}) == 5
        assert all(
            sorted(map(tuple, s.candidates)) == sorted(map(tuple, members[0].candidates)) for s in members
        )
    assert {files[0]["value"], files[1]["value"]} <= {s.answer for s in samples}


def test_candidate_scores_equal_separate_forward_passes():
    model = tiny_gpt(5)
    adapter = byte_adapter(model, batch_size=3)
    prompt = adapter.encode("The pass key is 12345. What is the pass key? It is")
    cands = [adapter.encode(" 12345"), adapter.encode(" 999"), adapter.encode(" 1")]
    got = adapter.score_continuations(prompt, cands)
    for c, g in zip(cands, got):
        lp = adapter.token_logprobs(prompt + c)[0, len(prompt) - 1 :]
        assert g == pytest.approx(float(lp.sum()), rel=1e-5)


class _PairedDigits:
    """Bytes, but a doubled digit ("00" .. "99") is one token (ids 0-9, control bytes no text here
    holds), as BPE merges some digit runs: keys and values then tokenize to different lengths."""

    def __init__(self, tok):
        self.tok = tok

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def encode(self, text: str) -> list[int]:
        import re

        out = []
        for m in re.finditer(r"(\d)\1|.", text, re.S):
            out += [int(m.group(1))] if m.group(1) else list(m.group().encode())
        return out

    def decode(self, ids) -> str:
        return "".join(2 * str(i) if i < 10 else self.tok.decode([i]) for i in ids)


def test_passkey_and_vartrack_prompts_are_the_length_asked_whatever_the_keys_tokenize_to():
    """The filler was cut to the set's longest key sentence (and vartrack's longest question), so a
    key that tokenized shorter gave a prompt short of the length asked (a user counted 51 of 120
    passkey prompts 2 tokens short on GPT-2's BPE)."""
    adapter = byte_adapter(tiny_gpt(6, context=128))
    adapter.tokenizer = _PairedDigits(adapter.tokenizer)
    o = passkey.Options(lengths=[400, 600], depths=[0, 50, 100], samples=4)
    samples, _ = passkey.build(adapter, o, None)
    keys = {len(adapter.encode(" " + s.answer)) for s in samples}
    assert len(keys) > 1  # the keys do tokenize to different lengths here
    assert [len(s.prompt) for s in samples] == [s.cell[1] for s in samples]
    for s in samples:  # the key sentence at its depth, the filler around it unbroken
        text = adapter.tokenizer.decode(s.prompt)
        assert text.count(f"The pass key is {s.answer}.") == 1 and text.endswith(passkey.QUESTION)
    vs, _ = vartrack.build(adapter, vartrack.Options(lengths=[500, 700], n_chains=4, samples=3), None)
    texts = [adapter.tokenizer.decode(s.prompt) for s in vs]
    questions = {len(adapter.encode(t[t.rindex("\n\nQuestion:") :])) for t in texts}
    assert len(questions) > 1  # the questions' values tokenize to different lengths
    assert [len(s.prompt) for s in vs] == [s.cell[0] for s in vs]


@pytest.mark.parametrize("bpe", [False, True], ids=["bytes", "gpt2"])
def test_the_pass_key_sentence_lies_between_two_filler_sentences_near_its_depth(bpe):
    """The key sentence went in at a token depth, inside a filler sentence ("The sky is The pass key
    is ..."); it goes at the sentence boundary nearest the depth, and the prompts stay exact."""
    from contextlab.data.tokenizers import load_tokenizer
    from contextlab.eval import controls
    from tests.conftest import GPT2_DIR

    if bpe:
        tok = load_tokenizer(f"gpt2:{GPT2_DIR}")
        adapter = controls.control_adapter(controls.CopyLM(tok.vocab_size, context=1024), tok, "copy-bpe")
    else:
        adapter = byte_adapter(tiny_gpt(6, context=1024))
    enc = adapter.encode
    depths = [0.0, 10.0, 33.0, 50.0, 77.0, 100.0]
    samples, _ = passkey.build(adapter, passkey.Options(lengths=[300, 517], depths=depths, samples=2), None)
    intro, question = passkey.INTRO, passkey.QUESTION
    sentence = max(len(enc(s + ".")) for s in passkey.FILLER.split(".")[:-1])  # the longest one's tokens
    assert sentence == (5 if bpe else 22)

    def key(answer: str) -> str:
        return f" The pass key is {answer}. Remember it. {answer} is the pass key."

    for s in samples:
        assert len(s.prompt) == s.cell[1]
        before, after = adapter.tokenizer.decode(s.prompt).split(key(s.answer))
        assert before.startswith(intro) and after.endswith(question)
        assert before == intro or before.endswith("."), before[-40:]  # a filler sentence ended
        rest = after[: -len(question)]  # the filler after the key (its last sentence may be cut short)
        assert any(rest[: len(w)] == w[: len(rest)] for w in (" The ", " Here ", " There ")), rest[:40]
        assert rest in passkey.FILLER * 40
        at = len(enc(before)) - len(enc(intro))  # filler tokens before the key
        group = [x for x in samples if x.group == s.group]
        n_fill = (
            s.cell[1] - len(enc(intro)) - max(len(enc(key(x.answer))) for x in group) - len(enc(question))
        )
        assert abs(at - s.cell[0] / 100 * n_fill) < sentence, (at, s.cell, n_fill)
        if s.cell[0] == 0:
            assert before == intro
    # the prompts of one set differ in the key only: the same filler before it
    assert (
        len({adapter.tokenizer.decode(s.prompt).split(" The pass key")[0] for s in samples if s.group == 3})
        == 1
    )


def test_passkey_vartrack_and_scoring_on_a_tiny_model():
    adapter = byte_adapter(tiny_gpt(6, context=128), batch_size=6)
    samples, _info = passkey.build(adapter, passkey.Options(lengths=[300], depths=[0, 100], samples=1), None)
    assert [len(s.prompt) for s in samples] == [300] * 10 and len({s.answer for s in samples[:5]}) == 5
    key = samples[6].answer
    assert adapter.tokenizer.decode(samples[6].prompt).count(key) == 2
    assert [s.group for s in samples] == [0] * 5 + [1] * 5
    assert adapter.tokenizer.decode(samples[6].control) == adapter.tokenizer.decode(
        samples[6].prompt
    ).replace(f" The pass key is {key}. Remember it. {key} is the pass key.", "")
    rows = scoring.score_samples(adapter, samples, "both", max_new_tokens=4)
    assert all(isinstance(r["likelihood_correct"], bool) and "generated" in r for r in rows)
    assert all(
        r["keyword_recall"] == scoring.keyword_recall(r["generated"], s.answer) for r, s in zip(rows, samples)
    )
    summary = tasks.summarize(rows, 5)
    assert 0 <= summary["summary"]["keyword_recall"] <= 1 and "keyword_recall" in summary["by_cell"][0]
    assert summary["summary"]["exact_match_ci95"] == list(
        stats.wilson(sum(r["exact"] for r in rows), len(rows))
    )
    out = vartrack.run(adapter, vartrack.Options(lengths=[700], samples=2, hops=2), None)
    s = out.results["summary"]
    assert s["chance"] == 0.5 and 0 <= s["likelihood_accuracy"] <= 1
    vs, _ = vartrack.build(adapter, vartrack.Options(lengths=[700], samples=1, hops=2), None)
    assert len(vs) == 2 and vs[0].answer != vs[1].answer
    for v in vs:  # the same text asked about each chain; the control drops the asked chain's statements
        text = adapter.tokenizer.decode(v.prompt)
        names = v.answer.split()
        assert len(v.prompt) == 700 and all(text.count(f"VAR {n} =") == 1 for n in names)
        assert [text.index(f"VAR {n} =") for n in names] == sorted(text.index(f"VAR {n} =") for n in names)
        control = adapter.tokenizer.decode(v.control)
        assert all(f"VAR {n} =" not in control for n in names) and control.endswith(text[-150:])
    other = vs[1].answer.split()
    assert all(f"VAR {n} =" in adapter.tokenizer.decode(vs[0].control) for n in other)


def test_icl_and_visible_sweep_run_on_a_tiny_model():
    adapter = byte_adapter(tiny_gpt(7, context=128), batch_size=6)
    trec = str(TREC)
    out = icl.run(adapter, icl.Options(shots=[0, 2], n_test=6, seeds=1, balance=False), trec)
    assert [r["shots"] for r in out.results["by_shots"]] == [0, 2]
    assert out.results["by_shots"][1]["context_tokens"] > out.results["by_shots"][0]["context_tokens"]
    samples = icl.build_prompts(
        adapter,
        icl.read_trec(TREC / "train.txt"),
        icl.read_trec(TREC / "test.txt")[:3],
        4,
        0,
    )
    assert all(adapter.tokenizer.decode(s.prompt).count("Question:") == 5 for s in samples)
    assert scoring.truncate(list(range(10)), 3) == [7, 8, 9] and scoring.truncate(list(range(10)), 0.5) == [
        5,
        6,
        7,
        8,
        9,
    ]
    sweep = visible.run(adapter, visible.Options(task="passkey", visible=[0.5, 1.0], length=300), None)
    pts = sweep.results["points"]
    assert (
        [p["visible"] for p in pts] == [0.5, 1.0]
        and pts[0]["prompt_tokens"] == 150
        and pts[1]["prompt_tokens"] == 300
    )


def test_icl_zero_shots_is_one_set_of_prompts_whatever_the_seeds():
    """Zero shots has no examples to draw: its prompts are the same for every seed, and were scored
    once per seed and counted as independent samples (n = 3 x the questions; the interval too narrow)."""
    adapter = byte_adapter(tiny_gpt(7, context=128), batch_size=6)
    out = icl.run(adapter, icl.Options(shots=[0, 2], n_test=6, seeds=3, balance=False), str(TREC))
    zero, two = out.results["by_shots"]
    assert (zero["n"], zero["n_sets"]) == (6, 1) and (two["n"], two["n_sets"]) == (18, 3)
    assert zero["ci95"] == list(stats.wilson(zero["accuracy"] * 6, 6))
    # what the interval counts is said: 18 answers to 6 questions are not 18 independent samples
    p = stats.proportion(out.arrays["correct_likelihood_correct"][6:], clusters=np.tile(np.arange(6), 3))
    assert two["n_effective"] == p["n_effective"] and two["ci95"] == p["ci95"]
    assert out.results["summary"]["n_effective_max_shots"] == two["n_effective"]
    assert two["n_effective"] < 17.5 and "of n=18 (as 5 independent)" in out.results["text"][1]
    # the first 6 test questions are not label-balanced: "chance 0.17" alone misled (a user's majority
    # label scored 0.30); the majority's share is said beside it
    majority = out.results["summary"]["majority_class"]
    said = [t for t in out.results["text"] if t.startswith("note: the test questions are not label-balanced")]
    assert (
        majority > 1 / 6 and len(said) == 1 and f"scores {majority:.2f}, above a uniform guess's" in said[0]
    )


def test_icl_saves_its_samples_and_reads_the_label_prior_out():
    """icl kept only accuracies per set: its outcomes could not be audited, and a byte model that
    picked the shortest label word for every question read as a model that ignores the shots, with
    nothing said. It saves per-sample arrays, counts the labels picked, scores the calibrated accuracy
    (the label the shots raise most) and notes a label picked for most questions."""
    adapter = byte_adapter(tiny_gpt(7, context=512), batch_size=6)
    out = icl.run(adapter, icl.Options(shots=[0, 2], n_test=10, seeds=2, balance=False), str(TREC))
    zero, two = out.results["by_shots"]
    a = out.arrays
    n = zero["n"] + two["n"]
    assert (zero["n"], two["n"]) == (10, 20) and all(len(v) == n for v in a.values())
    assert (
        a["cell"].tolist()[:10] == [[0, 0]] * 10 and a["cell"].tolist()[10:] == [[2, 0]] * 10 + [[2, 1]] * 10
    )
    assert a["unit"].tolist() == list(range(10)) * 3 == a["group"].tolist()
    labels = list(icl.LABELS.values())
    assert (
        a["label"].tolist()
        == [labels.index(ans) for _, ans in icl.select_test(icl.read_trec(TREC / "test.txt"), 10, False)] * 3
    )
    # the arrays are the rows' outcomes: correct exactly when the label picked is the true one
    assert ((a["predicted"] == a["label"]) == a["correct_likelihood_correct"].astype(bool)).all()
    for row, m in ((zero, slice(0, 10)), (two, slice(10, None))):
        assert row["accuracy"] == pytest.approx(a["correct_likelihood_correct"][m].mean())
        assert sum(row["predicted"].values()) == row["n"]
        assert row["predicted"] == {lab: int((a["predicted"][m] == i).sum()) for i, lab in enumerate(labels)}
    # zero shots: the prompt is its own control, nothing to calibrate
    assert zero["calibrated_accuracy"] is None and (a["correct_calibrated_correct"][:10] == -1).all()
    assert two["calibrated_accuracy"] == pytest.approx(a["correct_calibrated_correct"][10:].mean())
    assert (
        (a["calibrated_predicted"][10:] == a["label"][10:])
        == a["correct_calibrated_correct"][10:].astype(bool)
    ).all()
    assert two["calibrated_accuracy_per_set"] == [
        pytest.approx(a["correct_calibrated_correct"][10 + 10 * i : 20 + 10 * i].mean()) for i in range(2)
    ]
    assert f"calibrated accuracy {two['calibrated_accuracy']:.2f}" in out.results["text"][1]
    assert out.results["summary"]["calibrated_accuracy_max_shots"] == two["calibrated_accuracy"]
    # a label picked for most questions is said, naming the count; otherwise nothing
    for row in (zero, two):
        label, count = max(row["predicted"].items(), key=lambda kv: kv[1])
        said = [t for t in out.results["text"] if t.startswith(f"note: at {row['shots']} shots '{label}'")]
        assert len(said) == (count > row["n"] / 2)
    crafted = {
        **two,
        "n": 24,
        "predicted": dict.fromkeys(labels, 0) | {"human": 20},
        "calibrated_accuracy": 0.5,
    }
    (note,) = icl._prior_notes([crafted])
    assert (
        "'human' was the answer picked for 20 of 24" in note
        and "calibrated accuracy" in note
        and "0.50" in note
    )


def test_visible_defaults_to_the_longest_prompt_that_fits_the_context():
    """No --length: the task's longest default length (the context less the answer's room), not the
    context itself (its prompts with their answers ran past the context)."""
    import warnings

    from contextlab.eval.adapter import ContextLengthWarning

    adapter = byte_adapter(tiny_gpt(7, context=512), batch_size=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        sweep = visible.run(adapter, visible.Options(task="passkey", visible=[1.0]), None)
    full = sweep.results["points"][0]
    want = max(passkey.build(adapter, passkey.Options(depths=[50.0], samples=1), None)[1]["lengths"])
    assert full["prompt_tokens"] == want < 512


@pytest.mark.parametrize(
    "content, expect",
    [
        (b'{"key": "a", "ordered_kv_records": [["a", "1"]]}\n{not json\n', "line 2 is not JSON"),
        (b'{"key": "a"}\n', "line 1 has no 'key' and 'ordered_kv_records'"),
        (
            b'{"key": "a", "ordered_kv_records": ["a1"]}\n',
            'line 1: record 0 is "a1", not a [key, value] pair',
        ),
        (b'{"key": "b", "ordered_kv_records": [["a", "1"]]}\n', 'its key "b" is not among its records'),
        ("gz-cut", "cannot be read to its end"),
    ],
)
def test_a_damaged_kv_file_is_one_line_naming_the_file_and_line(tmp_path, content, expect):
    """Robustness II item 11: JSONDecodeError, KeyError, ValueError and EOFError became one line each."""
    import gzip as gz
    import re

    from contextlab.errors import UserError

    path = tmp_path / "kv.jsonl.gz"
    if content == "gz-cut":
        blob = KV_75.read_bytes()  # a gzip file, cut in the middle
        path.write_bytes(blob[: len(blob) // 2])
    else:
        path.write_bytes(gz.compress(content))
    with pytest.raises(UserError, match=re.escape(expect)) as e:
        kv.read_examples(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_icl_default_shots_fit_the_context_and_given_ones_may_pass_it():
    """Without --shots the counts 0, 2, 8, 32 run as far as their prompts fit the model's context, on any
    model (a RoPE model used to run 32 shots past its context with a warning while a fixed-position one
    skipped them); given counts still run past it on a RoPE model, with the warning."""
    import warnings

    from contextlab.eval.adapter import ContextLengthWarning

    adapter = byte_adapter(tiny_gpt(7, context=512), batch_size=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        out = icl.run(adapter, icl.Options(n_test=6, seeds=1, balance=False), str(TREC))
    ran = [r["shots"] for r in out.results["by_shots"]]
    assert ran[0] == 0 and 32 not in ran and 32 in out.results["skipped_shots"]
    assert all(r["context_tokens"] <= 512 for r in out.results["by_shots"])
    with pytest.warns(ContextLengthWarning, match="32 shots"):
        given = icl.run(adapter, icl.Options(shots=[32], n_test=6, seeds=1, balance=False), str(TREC))
    assert [r["shots"] for r in given.results["by_shots"]] == [32]


def test_a_long_context_settings_line_says_which_option_measures_shorter(monkeypatch, capsys):
    """When a model's context is long (minutes per prompt on a CPU) and the lengths followed it by default,
    the settings line names the option that measures shorter; given lengths, or a short context, no note.
    (The threshold is lowered here so a tiny model shows it.)"""
    from contextlab.eval import passkey

    adapter = byte_adapter(tiny_gpt(0, context=512))
    o = dict(depths=[50.0], samples=1, scoring="likelihood")
    passkey.run(adapter, passkey.Options(**o), None)
    assert "note" not in capsys.readouterr().out  # 512 tokens: short
    monkeypatch.setattr(tasks, "LONG_CONTEXT", 256)
    passkey.run(adapter, passkey.Options(**o), None)
    line = capsys.readouterr().out.splitlines()[0]
    assert line.endswith("note the defaults follow the model's 512-token context; --lengths measures shorter")
    passkey.run(adapter, passkey.Options(lengths=[400], **o), None)
    assert "note" not in capsys.readouterr().out


@pytest.mark.parametrize("task", ["niah", "passkey", "kv", "vartrack"])
def test_each_retrieval_result_keeps_its_sample_rows_with_answer_and_generation(task, tmp_path):
    """passkey, kv and vartrack saved only correctness arrays, so a wrong exact match could not be read
    beside what the model generated (niah kept rows): every retrieval task's result now holds one row per
    sample with its answer, its generated text and its likelihood fields."""
    adapter = byte_adapter(tiny_gpt(6, context=1024), batch_size=4)
    options = {
        "niah": needle.Options(lengths=[600], depths=[50], samples=1, max_new_tokens=4),
        "passkey": passkey.Options(lengths=[400], depths=[50], samples=1),
        "kv": kv.Options(n_examples=1, n_pairs=4, positions=[0], sets=1),
        "vartrack": vartrack.Options(lengths=[700], samples=1, hops=1),
    }[task]
    (tmp_path / "hay.txt").write_text("The grass is green. The sky is blue. " * 60)
    data = {"niah": str(tmp_path), "kv": str(KV_75)}.get(task)
    out = {"niah": needle, "passkey": passkey, "kv": kv, "vartrack": vartrack}[task].run(
        adapter, options, data
    )
    rows = out.results["samples"]
    assert len(rows) == len(out.arrays["group"]) > 0
    for r in rows:
        assert {"answer", "generated", "exact", "likelihood_correct", "cell"} <= set(r)
        assert r["exact"] == r["generated"].strip().lower().startswith(r["answer"].strip().lower())


def test_niah_haystack_reads_like_ingest_strict_encoding_and_no_provenance_files(tmp_path):
    """The haystack reader turned Latin-1 bytes into U+FFFD with no count, and fed SOURCE.txt (where
    the essays came from) into the haystack; now it follows ingest: strict by default naming the
    files, --encoding to decode them, provenance files left out and named in the data record."""
    (tmp_path / "a.txt").write_text("First essay.\r\n")
    (tmp_path / "b.txt").write_bytes(b"Caf\xe9 au lait.")
    (tmp_path / "SOURCE.txt").write_text("Downloaded from http://example.com")
    (tmp_path / "README.md").write_text("about")
    (tmp_path / "index.jsonl").write_text('{"file": "a.txt"}\n')
    with pytest.raises(
        UserError, match=r"1 file in .* is not valid UTF-8: b\.txt \(byte 3\); .*--encoding latin-1"
    ):
        needle.read_haystack(tmp_path)
    hay, record = needle.read_haystack(tmp_path, "latin-1")
    assert hay == "First essay.\n\n\nCafé au lait."
    assert record == {
        "haystack_files": 2,
        "left_out": [
            {"path": "README.md", "reason": "provenance, not text"},
            {"path": "SOURCE.txt", "reason": "provenance, not text"},
            {"path": "index.jsonl", "reason": "records, not prose"},
        ],
        "latin1_files": 1,
    }
    hay, record = needle.read_haystack(tmp_path, "replace")
    assert hay.endswith("Caf\ufffd au lait.") and record["undecodable_bytes"] == 1
    assert needle.read_haystack(tmp_path, "skip")[0] == "First essay.\n"
    (tmp_path / "a.txt").unlink(), (tmp_path / "b.txt").unlink()
    with pytest.raises(
        UserError,
        match=r"no text files in .* \(left out as provenance, not text: README\.md, SOURCE\.txt; "
        r"as records, not prose: index\.jsonl\)",
    ):
        needle.read_haystack(tmp_path)


def test_a_haystack_folder_is_read_as_ingest_reads_it_any_text_file_at_any_depth(tmp_path):
    """WikiText's test split is a folder of wiki.test.raw and SOURCE.txt: the profile's store read it,
    its needle step failed with "no .txt files" since only top-level .txt files were read. Now every
    text file at any depth is, in name order, with binary files skipped as ingest skips them."""
    (tmp_path / "wiki.test.raw").write_text("An article. It ends.")
    (tmp_path / "essays").mkdir()
    (tmp_path / "essays" / "b.md").write_text("A markdown essay.")
    (tmp_path / "SOURCE.txt").write_text("where it came from")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    hay, record = needle.read_haystack(tmp_path)
    assert hay == "A markdown essay.\n\nAn article. It ends."
    assert record["haystack_files"] == 2
    assert {"path": "SOURCE.txt", "reason": "provenance, not text"} in record["left_out"]
    assert [e["path"] for e in record["left_out"] if e["reason"].startswith("binary")] == ["blob.bin"]


def test_a_haystack_folder_of_links_to_books_elsewhere_says_to_copy_them(tmp_path):
    """A folder of links to the books elsewhere (what the SPLICE-vs-EP study made) read as "no .txt
    files" since niah reads a folder as data ingest does; the line names the links and the fix."""
    books, hay = tmp_path / "books", tmp_path / "hay"
    books.mkdir(), hay.mkdir()
    for name in ("a.txt", "b.txt"):
        (books / name).write_text("An essay.")
        (hay / name).symlink_to(books / name)
    with pytest.raises(UserError, match=r"a\.txt, b\.txt are links to files outside it.*copy the files"):
        needle.read_haystack(hay)
    for name in ("a.txt", "b.txt"):
        (hay / name).unlink()
        (hay / name).write_bytes((books / name).read_bytes())
    assert needle.read_haystack(hay)[1]["haystack_files"] == 2


def test_advice_for_prompts_past_the_context_never_points_back_to_what_was_refused():
    """vartrack at its shortest length on a 64-token model advised '--lengths of at most 49 (or leave
    --lengths out: the default fits)', and kv with 2 pairs 'leave --n-pairs out: the default fits';
    the default had been refused in both. Now they say the prompt measures extrapolation."""
    import warnings

    from contextlab.eval.adapter import ContextLengthWarning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ContextLengthWarning)
        vartrack.build(byte_adapter(tiny_gpt(0, context=64)), vartrack.Options(lengths=[389]), None)
        kv.build(byte_adapter(tiny_gpt(0, context=256)), kv.Options(n_pairs=3), None)
        kv.build(byte_adapter(tiny_gpt(0, context=560)), kv.Options(n_pairs=6), None)
    said = [str(w.message) for w in seen]
    assert said[0].endswith(
        "no vartrack prompt fits the model's context of 64 tokens (389 at least, and 15 of its answer), "
        "so every length measures extrapolation"
    )
    assert said[1].endswith(
        "even 2 pairs, the fewest a set holds, run past the context, so this kv measures extrapolation"
    )
    assert said[2].endswith("leave --n-pairs out: the default number of pairs fits")  # it does: 4 keys


def test_visible_icl_defaults_to_the_most_shots_that_fit_the_context():
    """--task icl took 32 shots by default: 656-token prompts on a 256-token model (an error on a model
    that cannot run past its context)."""
    adapter = byte_adapter(tiny_gpt(7, context=300), batch_size=6)
    train, test = (
        icl.read_trec(TREC / "train.txt"),
        icl.select_test(icl.read_trec(TREC / "test.txt"), 6, False),
    )
    shots, samples = visible._icl_shots(adapter, train, test, 0)
    longer = [k for k in icl.DEFAULT_SHOTS if k > shots]
    assert shots in icl.DEFAULT_SHOTS and max(len(s.prompt) for s in samples) + 4 <= 300
    assert (
        longer and max(len(s.prompt) for s in icl.build_prompts(adapter, train, test, longer[0], 0)) + 4 > 300
    )
    assert visible._icl_shots(adapter, train, test, 32)[0] == 32  # given: kept (a warning says it runs past)


def test_a_default_length_too_short_for_the_task_is_said(capsys):
    """niah and passkey dropped the quarter-context length on a short context without a word."""
    lengths = tasks.prompt_lengths("passkey", 256, None, room=10, shortest=100)
    assert lengths == [118, 246]  # 0.5 and 1.0 of 256 less the room; 0.25 (54) is too short
    assert capsys.readouterr().err == (
        "note: passkey: the default length at 0.25 of the 256-token context is shorter than the task's "
        "fixed text (100 tokens at least) and left out; measuring 118, 246\n"
    )
    assert tasks.prompt_lengths("passkey", 1024, None, room=10, shortest=100) == [246, 502, 1014]
    assert capsys.readouterr().err == ""


def test_a_kv_value_generated_with_the_quote_the_prompt_writes_it_in_is_an_exact_match():
    """kv's prompt writes each value in JSON quotes, so a model that copies the value generates
    ` "bb3b..."`; exact match compared that with the bare value and was 0 for a perfect answer."""
    from contextlab.eval.scoring import _answer

    value = "bb3ba2a5-57a5-4e45-9a51-e0c2c6b1d8f0"
    row: dict = {}
    _answer(row, f' "{value}",\n "9f', value)
    assert row["exact"] and row["contains"]
    _answer(row, f" {value}", value)
    assert row["exact"]
    _answer(row, ' "0c2c6b1d"', value)
    assert not row["exact"] and not row["contains"]


def test_kv_intervals_cluster_by_example_not_by_the_candidate_set_of_each_position(tmp_path):
    """kv asks each example's same pairs at every position, so its answers agree across positions: its
    intervals took each (example, position) candidate set as independent (5 positions of 20 examples read
    as 100 sets). Samples carry their example as ``unit``, the intervals and ``compare`` cluster by it."""
    adapter = byte_adapter(tiny_gpt())
    samples, info = kv.build(adapter, kv.Options(n_examples=2, n_pairs=6, positions=[0, 2, 5], sets=1), KV_75)
    k = info["distractors"] + 1
    assert [s.unit for s in samples] == [e for e in range(2) for _ in range(3 * k)]
    assert len({s.group for s in samples}) == 2 * 3  # a candidate set per example and position
    # 10 examples, each right at every position or wrong at every one: 10 independent answers, not 50
    rows = [
        {"cell": [p], "group": 5 * e + p, "unit": e, "likelihood_correct": e % 2, "prompt_tokens": 9}
        for e in range(10)
        for p in range(5)
    ]
    summary = tasks.summarize(rows, 1)["summary"]
    assert summary["likelihood_accuracy"] == 0.5
    assert summary["likelihood_accuracy_n_effective"] == pytest.approx(9)  # 10 x (G - 1) / G, G = 10
    assert summary["likelihood_accuracy_ci95"] == pytest.approx(list(stats.wilson(4.5, 9)))
    by_set = tasks.summarize([{**r, "unit": r["group"]} for r in rows], 1)["summary"]
    assert by_set["likelihood_accuracy_ci95"] == pytest.approx(list(stats.wilson(25, 50)))  # as it was
    saved = tasks.sample_arrays(rows)
    assert saved["unit"].tolist() == [r["unit"] for r in rows]
    assert saved["group"].tolist() == [r["group"] for r in rows]


def test_calibrated_accuracy_takes_the_candidates_own_prior_out():
    """A user's model raised the true needle by 22-30 nats, yet scored chance: the shortest of five
    answers (18 tokens against 20-25) won every set by its summed log-probability. The calibrated
    accuracy picks the candidate the evidence raises most (with it minus without), so the prior cancels;
    the summary says when the two disagree."""

    class Scorer:  # each token costs 3 nats; the evidence for answer j raises answer j by 5
        def score_continuations(self, prompt, cands):
            return np.array([-3.0 * len(c) + (5.0 if prompt[-1] == c[0] else 0.0) for c in cands])

    pool = [[i] * n for i, n in enumerate((24, 22, 18, 25, 20), start=1)]
    rows = []
    for g in range(8):
        for j, cands in enumerate(tasks.rotations(pool)):
            s = tasks.Sample([0, 9, j + 1], "a", cands, (0,), control=[0, 9, 0], group=g)
            rows.append(
                {
                    "cell": [0],
                    "group": g,
                    "prompt_tokens": 3,
                    **scoring._likelihood(Scorer(), s, s.prompt, None, {}),
                }
            )
    summary = tasks.summarize(rows, 5)["summary"]
    assert summary["likelihood_accuracy"] == pytest.approx(0.2)  # the shortest wins: 1 of 5 in each set
    assert summary["calibrated_accuracy"] == 1.0
    lines = tasks.summary_lines(summary)
    assert lines[1].startswith("calibrated accuracy 1.00 [") and ", chance 0.20" in lines[1]
    assert lines[-1].startswith("note: the evidence raises the true answer most in 1.00 of the prompts")
    # a model that copies the last value it saw raises the true one too (present only with its pair):
    # the note names both readings, and the likelihood accuracy as the test of retrieval
    assert "without finding the one asked for" in lines[-1]
    assert lines[-1].endswith("the likelihood accuracy is the test of retrieval")

    class Blind:  # reads no evidence: every gain is 0, a tie that goes the same way in every rotation
        def score_continuations(self, prompt, cands):
            return np.array([-3.0 * len(c) for c in cands])

    blind = [
        {"cell": [0], "group": g, "prompt_tokens": 3, **scoring._likelihood(Blind(), s, s.prompt, None, {})}
        for g in range(4)
        for j, cands in enumerate(tasks.rotations(pool))
        for s in [tasks.Sample([0, 9, j + 1], "a", cands, (0,), control=[0, 9, 0], group=g)]
    ]
    assert tasks.summarize(blind, 5)["summary"]["calibrated_accuracy"] == pytest.approx(0.2)  # chance

"""``contextlab profile``: the battery fitted to the model's context, paired with a second model,
resumable, written where the user said and never into a model's folder."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from contextlab.cli import main
from contextlab.data.kv_synthetic import kv_examples, pairs_that_fit, write_kv_file
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.errors import UserError
from contextlab.eval.adapter import ContextLengthWarning
from contextlab.eval.kv import read_examples
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.profile import BUDGETS
from contextlab.profile.plan import build, kv_positions
from contextlab.train.checkpoint import write_untrained_run
from tests.conftest import save_tiny_llama, shakespeare

CONTEXT = 512


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two byte-level GPTs (random weights, context 512) saved as ordinary runs."""
    root = tmp_path_factory.mktemp("runs")
    out = []
    for seed, name in enumerate(("first", "second")):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32, context=CONTEXT))
        write_untrained_run(root / name, model, ByteTokenizer(), note="random init")
        out.append(root / name)
    return out


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    play = shakespeare(48_000)
    for i in range(4):
        (folder / f"part{i}.txt").write_text(play[i * 12_000 : (i + 1) * 12_000])
    return folder


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, runs, text):
    out = tmp_path_factory.mktemp("p") / "profile"
    argv = ["profile", "--model", str(runs[0]), "--compare", str(runs[1]), "--data", str(text)]
    argv += ["--out", str(out), "--no-progress", "--threads", "1"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)  # no prompt of the battery runs past the context
        assert main(argv) == 0
    return out, argv


def test_lengths_follow_the_context_and_never_pass_it():
    from contextlab.eval import needle, passkey, tasks
    from tests.eval.conftest import byte_adapter, tiny_gpt

    adapter = byte_adapter(tiny_gpt(0, context=2048))  # the profile's context C may be below the model's
    for C in (512, 1024, 2048):
        steps = {
            s.name: s
            for s in build(
                C, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=7, attention=""
            )
        }
        for name, module in (("niah", needle), ("passkey", passkey)):
            o = steps[name].options
            lengths, room, shortest = module.lengths_for(adapter, o)
            assert lengths == tasks.default_lengths(
                C, (0.25, 0.5, 1.0), room, shortest
            )  # the task's own rule, at C
            assert max(lengths) + room <= C and min(lengths) >= shortest and not steps[name].skip
    assert steps["contextwise"].options.length == C + 1  # context lengths 1..C, none beyond
    assert steps["bayes-fit"].options.lengths == [2**i for i in range(12)]
    at_96 = build(
        96, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=0, attention=""
    )
    assert next(s for s in at_96 if s.name == "bayes-fit").options.lengths == [1, 2, 4, 8, 16, 32, 64, 96]
    assert steps["kv"].options.positions == [0, 3, 6] and steps["kv"].options.n_pairs == 7
    assert all(s.options.scoring == "likelihood" for n, s in steps.items() if n in ("niah", "passkey", "kv"))
    assert kv_positions(1, 5) == [0] and kv_positions(9, 5) == [0, 2, 4, 6, 8]
    short = {
        s.name: s.skip
        for s in build(
            128, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=0, attention=""
        )
    }
    assert "no room for a niah prompt" in short["niah"]  # bytes: the needle sentence and question need more
    with pytest.raises(UserError, match="at least 64"):
        build(32, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=0, attention="")


def test_kv_file_is_the_lost_in_the_middle_format_and_deterministic(tmp_path):
    f = write_kv_file(tmp_path / "kv.jsonl.gz", 3, 5, seed=2)
    rows = read_examples(f)
    assert len(rows) == 3 and all(len(r["ordered_kv_records"]) == 5 for r in rows)
    assert all(r["key"] in [k for k, _ in r["ordered_kv_records"]] for r in rows)
    assert gzip.decompress(f.read_bytes()) == gzip.decompress(
        write_kv_file(tmp_path / "b.jsonl.gz", 3, 5, 2).read_bytes()
    )
    assert kv_examples(1, 4, seed=1) != kv_examples(1, 4, seed=2)
    assert pairs_that_fit(lambda n: 100 + 30 * n, 250) == 5 and pairs_that_fit(lambda n: 300, 250) == 0


def test_profile_writes_every_measure_and_pairs_them(profiled, runs):
    out, _ = profiled
    doc = json.loads((out / "profile.json").read_text())
    assert doc["format"] == "contextlab-profile" and doc["context"] == CONTEXT and doc["budget"] == "quick"
    labels = [m["label"] for m in doc["models"]]
    assert labels == ["first", "second"]
    status = {(s["name"], s["model"]): s["status"] for s in doc["steps"]}
    for label in labels:
        for name in ("contextwise", "bayes-fit", "niah", "passkey", "kv"):
            assert status[(name, label)] == "done", (name, label, doc["steps"])
            assert (out / "models" / label / f"{name}.json").is_file()
    kv = json.loads((out / "models/first/kv.json").read_text())["options"]
    assert kv["n_pairs"] == 3  # as many 72-byte UUID pairs as fit 512 bytes with the question and a margin
    assert status[("attention", "first+second")] == "done"
    cw = json.loads((out / "models/first/contextwise.json").read_text())["results"]
    assert cw["length"] == CONTEXT + 1 and not any(b["beyond_train_context"] for b in cw["buckets"])
    for name in ("contextwise", "bayes-fit", "niah", "passkey", "kv"):
        assert (out / "compare" / f"compare_{name}.json").is_file()
    rows = {r["measure"].split(" (")[0]: r for r in doc["headline"]}
    best = rows["best-context loss"]
    comp = json.loads((out / "compare/compare_contextwise.json").read_text())["results"]["best_context"]
    assert best["diff"] == pytest.approx(best["values"]["second"] - best["values"]["first"])
    assert best["diff"] == pytest.approx(-comp["diff"]) and best["ci95"] == pytest.approx(
        [-comp["interval95"][1], -comp["interval95"][0]]
    )
    needle = rows["needle accuracy"]
    assert needle["values"]["first"] == pytest.approx(0.2) and needle["chance"] == pytest.approx(
        0.2
    )  # balanced sets
    assert rows["attention mean distance"]["ci95"] is not None
    assert (out / "report.html").is_file() and not any(p.name.startswith("eval") for p in runs[0].iterdir())


def test_a_rerun_resumes_and_redoes_only_what_is_missing(profiled, capsys):
    out, argv = profiled
    doc = json.loads((out / "profile.json").read_text())
    before = {p: p.stat().st_mtime_ns for p in (out / "models").rglob("*.json")}
    for s in doc["steps"]:  # as if the profile had been killed inside the passkey step of "second"
        if s["name"] == "passkey" and s["model"] == "second":
            s["status"] = "running"
    (out / "profile.json").write_text(json.dumps(doc))
    (out / "models/second/passkey.json").unlink()
    assert main(argv) == 0
    after = {p: p.stat().st_mtime_ns for p in (out / "models").rglob("*.json")}
    redone = [p.relative_to(out).as_posix() for p in after if before.get(p) != after[p]]
    assert redone == ["models/second/passkey.json"]
    steps = json.loads((out / "profile.json").read_text())["steps"]
    assert all(s["status"] in ("done", "skipped") for s in steps)
    printed = capsys.readouterr().out  # the headline on the console names each task's chance level
    assert "  passkey accuracy (fraction, higher is better, chance 0.200): " in printed
    assert "best-context loss (nats/token, lower is better): " in printed


def test_profiles_are_never_mixed_or_written_into_a_model(profiled, runs, text, tmp_path, capsys):
    _, argv = profiled
    other = [a if a != "--compare" else "--budget" for a in argv]
    other[other.index("--budget") + 1] = "standard"
    assert main(other) != 0
    err = capsys.readouterr().err
    assert (
        "holds a profile of other settings (models " in err and "; budget quick there, standard now)" in err
    )
    assert main(["profile", "--model", str(runs[0]), "--data", str(text), "--out", str(runs[0] / "p")]) != 0
    err = capsys.readouterr().err
    assert "--out" in err and str(runs[0]) in err
    assert not (runs[0] / "p").exists()


def test_a_profile_stopped_by_its_data_resumes_in_its_folder_and_never_mixes_texts(runs, tmp_path, capsys):
    """A profile that stops while preparing its data (text that holds nothing yet) has made its folder; the
    same command, once the data is mended, runs in it rather than being refused as a stranger's; text
    changed under a measured profile is refused, not mixed with what its steps read."""
    folder = tmp_path / "essays"
    folder.mkdir()
    (folder / "one.txt").write_text("")
    out = tmp_path / "p"
    argv = ["profile", "--model", str(runs[0]), "--data", str(folder), "--out", str(out), "--no-progress"]
    assert main([*argv, "--threads", "1"]) != 0
    assert "no documents in" in capsys.readouterr().err
    assert (out / "data").is_dir() and not (out / "profile.json").exists()
    (folder / "one.txt").write_text(shakespeare(2_000))
    assert main([*argv, "--threads", "1"]) == 0
    steps = json.loads((out / "profile.json").read_text())["steps"]
    assert steps and all(s["status"] in ("done", "skipped") for s in steps)
    store = next((out / "data").glob("store-*"))
    assert json.loads((store / "meta.json").read_text())["n_tokens"] == 2_000
    (folder / "two.txt").write_text(shakespeare(1_000))  # the text changes under a measured profile
    assert main([*argv, "--threads", "1"]) != 0
    assert "has changed since this profile" in capsys.readouterr().err
    mine = tmp_path / "mine"  # a folder of the user's own that has a data/ too is not taken for one
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "notes.txt").write_text("mine")
    assert main([*argv[:-3], "--out", str(mine), "--no-progress", "--threads", "1"]) != 0
    assert "exists and holds no profile" in capsys.readouterr().err
    assert [p.name for p in mine.rglob("*")] == ["data", "notes.txt"]


def test_context_measures_at_a_shorter_length_and_is_refused_past_the_models(runs, text, tmp_path, capsys):
    """--context: a model whose context is longer than the machine or the data can serve is measured at a
    shorter one; every length follows it, and a --context past the model's is one line."""
    out = tmp_path / "short"
    argv = ["profile", "--model", str(runs[0]), "--data", str(text), "--out", str(out), "--no-progress"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        assert main([*argv, "--context", "384", "--threads", "1"]) == 0
    doc = json.loads((out / "profile.json").read_text())
    assert doc["context"] == 384
    results = out / "models" / "first"
    assert json.loads((results / "contextwise.json").read_text())["options"]["length"] == 385
    for name in ("niah", "passkey"):
        lengths = json.loads((results / f"{name}.json").read_text())["options"]["lengths"]
        assert 256 < max(lengths) < 384
    bf = json.loads((results / "bayes-fit.json").read_text())
    assert bf["options"]["lengths"] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 384]  # ends at the context
    gain = next(r for r in doc["headline"] if r["measure"].startswith("context gain (random targets"))
    assert "1 vs the context visible" in gain["measure"]
    assert bf["results"]["context_gain"]["visible"] == [1, 384]
    assert gain["values"]["first"] == pytest.approx(bf["results"]["loss"][0] - bf["results"]["loss"][-1])
    capsys.readouterr()
    assert main([*argv[:-3], "--out", str(tmp_path / "long"), "--context", str(CONTEXT + 1)]) != 0
    err = capsys.readouterr().err
    assert f"--context {CONTEXT + 1}" in err and f"({CONTEXT})" in err
    assert not (tmp_path / "long" / "profile.json").exists()


def test_default_out_is_a_new_folder_in_the_current_directory(runs, monkeypatch, tmp_path):
    from contextlab.profile.runner import default_out

    monkeypatch.chdir(tmp_path)
    assert default_out([str(runs[0])], "quick") == tmp_path / "profile-first-quick"
    assert default_out([str(runs[0]), str(runs[1])], "full") == tmp_path / "profile-first-vs-second-full"
    same = tmp_path / "x" / "first"
    shutil.copytree(runs[0], same)
    assert default_out([str(runs[0]), str(same)], "quick").name == "profile-a_first-vs-b_first-quick"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny Hugging Face Llama folder (save_pretrained, 512 positions) with a small BPE tokenizer.json."""
    return save_tiny_llama(tmp_path_factory.mktemp("hf") / "tiny-llama", vocab=400, layers=2, chars=40_000)


def test_a_hugging_face_folder_is_profiled_with_its_own_tokenizer(llama, text, tmp_path):
    out = tmp_path / "hf-profile"
    argv = ["profile", "--model", str(llama), "--data", str(text), "--out", str(out), "--no-progress"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        assert main([*argv, "--threads", "1"]) == 0
    doc = json.loads((out / "profile.json").read_text())
    assert doc["context"] == 512 and [m["label"] for m in doc["models"]] == ["tiny-llama"]
    status = {s["name"]: s for s in doc["steps"]}
    assert all(status[n]["status"] == "done" for n in ("contextwise", "bayes-fit", "niah", "passkey", "kv"))
    assert status["attention"]["status"] == "done"  # transformers' own weights, read under eager attention
    attention = json.loads((out / "models/tiny-llama/attention.json").read_text())["results"]["models"]["a"]
    assert attention["architecture"] == "LlamaForCausalLM" and attention["blocks"]["n_layers"] == 2
    row = next(r for r in doc["headline"] if r["measure"].startswith("attention mean distance"))
    assert row["values"]["tiny-llama"] == pytest.approx(attention["blocks"]["mean_distance_averaged"])
    store = json.loads((out / "models/tiny-llama/contextwise.json").read_text())["data"]["store"]
    assert store.startswith(str(out / "data" / "store-"))  # the text, ingested with the model's own tokenizer
    assert not any(
        p.name in ("eval", "profile.json") for p in llama.iterdir()
    )  # nothing written into the model


def test_two_folders_of_one_tokenizer_share_the_store_and_resume(llama, text, tmp_path):
    """A base model and its fine-tuned copy in two folders (one tokenizer) share OUT/data's store, whose
    fingerprint held the first tokenizer file's path: the second model ingested the text again over it,
    and a rerun of the finished pair was refused as "--data has changed since this profile measured it"."""
    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.profile.data import prepare_store

    copy = tmp_path / "tuned"
    shutil.copytree(llama, copy)
    text = shutil.copytree(text, tmp_path / "text")
    a, b = load_model(str(llama)), load_model(str(copy))
    out = tmp_path / "p"
    store = prepare_store(str(text), a, out, False)
    made = TokenStore(store).meta["created"]
    assert prepare_store(str(text), b, out, False) == store and TokenStore(store).meta["created"] == made
    for adapter in (a, b):  # a rerun after both measured it: the same store, not "changed"
        assert prepare_store(str(text), adapter, out, False, measured=True) == store
    assert TokenStore(store).meta["created"] == made
    (text / "added.txt").write_text("A new file of text. " * 50)  # the text itself changed: still refused
    with pytest.raises(UserError, match="has changed since this profile"):
        prepare_store(str(text), b, out, False, measured=True)


def test_two_models_of_different_tokenizers_need_text_data(llama, runs, text, tmp_path, capsys):
    from contextlab.data.ingest import IngestConfig, ingest

    store = ingest(text, tmp_path / "bytes", IngestConfig(), progress=False).store
    argv = ["profile", "--model", str(runs[0]), "--compare", str(llama), "--data", str(store.path)]
    assert main([*argv, "--out", str(tmp_path / "o"), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "different tokenizers" in err and "give --data the text" in err


def test_a_store_of_another_tokenizer_is_refused_before_any_step(llama, text, tmp_path, capsys):
    """A byte-level store given to a BPE model: one line and a non-zero exit before the battery starts
    (it used to record failed contextwise and bayes-fit steps, skip half the headline and exit 0)."""
    from contextlab.data.ingest import IngestConfig, ingest

    store = ingest(text, tmp_path / "bytes", IngestConfig(), progress=False).store
    out = tmp_path / "o"
    argv = ["profile", "--model", str(llama), "--data", str(store.path), "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        "tokenizer" in err
        and "contextlab data ingest" in err
        and err.startswith("contextlab profile: error:")
    ), err
    assert not (out / "profile.json").exists()


def test_attention_runs_per_model_when_the_pair_cannot(llama, runs):
    """With two models that cannot be paired for attention (two tokenizers, or a model whose attention
    cannot be read), each model gets its own attention step as far as it can: the one that can be read
    runs, the other is skipped with its reason (it used to be skipped for both)."""
    from contextlab.eval import load_model
    from contextlab.profile.plan import Step
    from contextlab.profile.runner import Model, _jobs, attention_problem

    opened = [
        Model("first", str(runs[0]), load_model(str(runs[0]))),
        Model("hf", str(llama), load_model(str(llama))),
    ]
    assert attention_problem(opened) == attention_problem(opened[1:]) == ""  # transformers' weights are read
    opened[1].adapter.model = torch.nn.Linear(2, 2)  # a model in which no attention module is found
    assert attention_problem(opened[:1]) == "" and "no module named ...Attention" in attention_problem(
        opened[1:]
    )
    assert attention_problem(opened) == attention_problem(opened[1:])
    plans = {
        m.label: [
            Step("contextwise", None, "S", 1.0, 1.0),
            Step("attention", None, "S", 1.0, 0.0, skip=attention_problem([m])),
        ]
        for m in opened
    }
    alone = [(label, s.name, s.skip != "", pair) for label, s, pair in _jobs(opened, plans, pair=False)]
    assert alone == [
        ("first", "contextwise", False, False),
        ("hf", "contextwise", False, False),
        ("first", "attention", False, False),
        ("hf", "attention", True, False),
    ]
    paired = [(label, s.name, pair) for label, s, pair in _jobs(opened, plans, pair=True)]
    assert paired[-1] == ("first+hf", "attention", True) and len(paired) == 3


def test_the_headline_shows_each_models_own_attention_when_the_pair_could_not_run(tmp_path):
    """Without the pair's analysis the attention row reads each model's own (its summary keyed "a") and
    names why a model has none; it showed '(done)' and no value."""
    from contextlab.profile.headline import _attention

    (tmp_path / "models" / "first").mkdir(parents=True)
    doc = {"results": {"summary": {"a": {"mean_distance": 31.36}}}}
    (tmp_path / "models" / "first" / "attention.json").write_text(json.dumps(doc))
    manifest = {
        "steps": [
            {"name": "attention", "model": "first", "status": "done", "error": None},
            {"name": "attention", "model": "hf", "status": "skipped", "error": "needs contextlab modules"},
        ]
    }
    row = _attention(tmp_path, manifest, ["first", "hf"])
    assert row["values"] == {"first": 31.36} and row["note"] == "hf: needs contextlab modules"


def test_steps_that_read_the_data_skip_when_no_document_is_long_enough():
    from tests.eval.conftest import byte_adapter, tiny_gpt

    adapter = byte_adapter(tiny_gpt(0, context=1024))

    def skips(longest: int) -> dict[str, str]:
        steps = build(
            512, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=7, attention="",
            doc_lengths=[longest] if longest else None,
        )  # fmt: skip
        return {s.name: s.skip for s in steps}

    assert not any(skips(513).values()) and not any(skips(0).values())  # 0: not known
    at_512 = skips(512)  # contextwise and bayes-fit read C + 1 tokens of a document, attention C
    assert at_512["contextwise"] and at_512["bayes-fit"] and not at_512["attention"]
    at_300 = skips(300)
    assert at_300["contextwise"] == (
        "the data's longest document has 300 tokens and this step reads 513 of one document at context 512: "
        "measure at --context 299 or give data of longer documents"
    )
    assert "reads 512 of one document" in at_300["attention"]
    assert not (at_300["niah"] or at_300["passkey"] or at_300["kv"])  # they do not read the store
    assert "give data with documents of at least 65 tokens" in skips(40)["bayes-fit"]


def test_the_estimate_counts_the_pieces_a_small_store_holds():
    """A run's held-out part of a few documents gives contextwise fewer pieces, and attention fewer rows,
    than the budget's; the estimate counted the budget's (it said minutes for seconds of work)."""
    from tests.eval.conftest import byte_adapter, tiny_gpt

    adapter = byte_adapter(tiny_gpt(0, context=1024))
    budget = BUDGETS["quick"]

    def work(doc_lengths) -> dict[str, float]:
        steps = build(
            512, budget, adapter, store="S", haystack=None, kv_file="K", kv_pairs=7, attention="",
            doc_lengths=doc_lengths,
        )  # fmt: skip
        return {s.name: s.tokens for s in steps}

    many, few = work(None), work([513 * 3 + 10, 600])  # 3 + 1 pieces of 513 tokens; 2 rows of 512
    assert few["contextwise"] == many["contextwise"] * 4 / budget.contextwise_docs
    assert few["attention"] == many["attention"] * 2 / budget.attention_rows
    assert few["bayes-fit"] == many["bayes-fit"]  # its targets are drawn to the budget's count on any store
    assert work([513] * 10_000) == many  # a store with more pieces than the budget's is estimated as before


def test_a_profile_on_short_documents_says_what_it_skips_before_it_runs(runs, tmp_path, capsys):
    folder = tmp_path / "short"
    folder.mkdir()
    play = shakespeare(3_000)
    for i in range(10):
        (folder / f"q{i}.txt").write_text(play[i * 300 : (i + 1) * 300])  # 300 bytes each: below 513
    out = tmp_path / "p"
    argv = ["profile", "--model", str(runs[0]), "--data", str(folder), "--out", str(out), "--no-progress"]
    assert main([*argv, "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [line for line in lines if "skipped:" in line]
    assert [line.split(" skipped:")[0].strip() for line in said] == [
        "contextwise (first)",
        "bayes-fit (first)",
        "attention (first)",
    ]
    assert all("--context 299" in line for line in said)
    assert lines.index(said[0]) < next(i for i, line in enumerate(lines) if line.startswith("niah:"))
    status = {s["name"]: s["status"] for s in json.loads((out / "profile.json").read_text())["steps"]}
    assert status == {
        "contextwise": "skipped",
        "bayes-fit": "skipped",
        "niah": "done",
        "passkey": "done",
        "kv": "done",
        "attention": "skipped",
    }


def test_a_profile_stopped_half_way_lists_every_step_in_its_manifest(runs, tmp_path, monkeypatch):
    """A profile interrupted before its kv step had no kv record in profile.json (the step it later
    marked skipped or ran was missing, not pending)."""
    import contextlab.profile.runner as runner

    folder = tmp_path / "short"
    folder.mkdir()
    play = shakespeare(3_000)
    for i in range(10):
        (folder / f"q{i}.txt").write_text(play[i * 300 : (i + 1) * 300])  # too short for 3 of the steps
    out = tmp_path / "p"

    def stop(step, *a, **k):
        raise KeyboardInterrupt  # Ctrl-C during the first step that runs

    monkeypatch.setattr(runner, "run_step", stop)
    argv = ["profile", "--model", str(runs[0]), "--data", str(folder), "--out", str(out), "--no-progress"]
    assert main([*argv, "--threads", "1"]) == 130
    status = {s["name"]: s["status"] for s in json.loads((out / "profile.json").read_text())["steps"]}
    assert status == {
        "contextwise": "skipped",
        "bayes-fit": "skipped",
        "niah": "running",
        "passkey": "pending",
        "kv": "pending",
        "attention": "skipped",
    }


def test_a_context_gain_without_an_interval_says_why(tmp_path):
    """Profiling one text file (one document) gave context gains, and the best-context loss, with no
    interval and no word on why."""
    from contextlab.profile.headline import ONE_DOCUMENT, headline

    folder = tmp_path / "models" / "run"
    folder.mkdir(parents=True)
    one = {"best_context_loss": 6.8, "best_context_loss_interval95": None, "context_gain": 0.075}
    several = {**one, "context_gain_interval95": [0.06, 0.09], "best_context_loss_interval95": [6.7, 6.9]}
    manifest = {"models": [{"label": "run"}], "steps": []}
    for summary, note in ((one, f"run: {ONE_DOCUMENT}"), (several, None)):
        for name in ("contextwise", "bayes-fit"):
            (folder / f"{name}.json").write_text(json.dumps({"results": {"summary": summary}}))
        rows = {r["measure"]: r for r in headline(tmp_path, manifest)}
        gains = [r for m, r in rows.items() if m.startswith("context gain")]
        assert len(gains) == 2 and all(r["values"] == {"run": 0.075} for r in gains)
        assert all(r.get("note") == note for r in gains)
        assert rows["best-context loss"].get("note") == note  # a user's --split run row said nothing


def test_a_loss_read_on_the_training_store_says_so(tmp_path):
    """A profile of a run on the store it trained on gave its losses as if held out."""
    from contextlab.profile.headline import IN_SAMPLE, headline

    folder = tmp_path / "models" / "run"
    folder.mkdir(parents=True)
    summary = {"best_context_loss": 5.1, "best_context_loss_interval95": [5.0, 5.2], "context_gain": 0.17}
    summary["context_gain_interval95"] = [0.16, 0.18]
    manifest = {"models": [{"label": "run"}], "steps": []}
    for data, note in (({"hash": "h", "training_store": True}, f"run: {IN_SAMPLE}"), ({"hash": "h"}, None)):
        for name in ("contextwise", "bayes-fit"):
            doc = {"data": data, "results": {"summary": summary}}
            (folder / f"{name}.json").write_text(json.dumps(doc))
        rows = {r["measure"]: r for r in headline(tmp_path, manifest)}
        losses = [r for m, r in rows.items() if m.startswith(("context gain", "best-context"))]
        assert len(losses) == 3 and all(r.get("note") == note for r in losses)


def test_a_text_folder_is_read_without_its_notes_and_records_as_the_haystack_is(runs, tmp_path, capsys):
    """WikiText's test split is wiki.test.raw and SOURCE.txt: the profile ingested SOURCE.txt as a
    document of its store while its needle step (then reading only .txt files) failed on the same
    folder. Now both read the text files and leave out the corpus's notes and record files, named."""
    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.profile.data import prepare_store

    folder = tmp_path / "wikitext"
    folder.mkdir()
    (folder / "wiki.test.raw").write_text(shakespeare(2_000))
    (folder / "SOURCE.txt").write_text("Downloaded from the Hugging Face hub.")
    (folder / "manifest.jsonl").write_text('{"file": "wiki.test.raw"}\n')
    store = prepare_store(str(folder), load_model(runs[0]), tmp_path / "p", False)
    said = capsys.readouterr().out
    assert "SOURCE.txt, manifest.jsonl left out of" in said
    store = TokenStore(store)
    assert len(store.lengths()) == 1 and bytes(store.doc(0).tolist()).decode() == shakespeare(2_000)


def test_a_step_out_of_memory_fails_alone_and_the_estimate_is_said_first(
    runs, text, tmp_path, capsys, monkeypatch
):
    """Running out of memory in one step ended the whole profile with a traceback; it is now that step's
    failure, with one line, and the battery goes on. The opening lines carry the time estimate."""
    import contextlab.profile.runner as runner

    real = runner.run_step
    no_memory = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 52698284032 bytes"

    def kv_without_memory(step, *args, **kwargs):
        if step.name == "kv":
            raise RuntimeError(no_memory)
        return real(step, *args, **kwargs)

    monkeypatch.setattr(runner, "run_step", kv_without_memory)
    out = tmp_path / "p"
    argv = ["profile", "--model", str(runs[0]), "--data", str(text), "--out", str(out), "--no-progress"]
    assert main([*argv, "--threads", "1"]) == 0
    said = capsys.readouterr().out.splitlines()
    estimate = next(i for i, line in enumerate(said) if "estimated time on this machine: about" in line)
    assert estimate < next(i for i, line in enumerate(said) if line.startswith("contextwise:"))
    doc = json.loads((out / "profile.json").read_text())
    status = {s["name"]: (s["status"], s["error"]) for s in doc["steps"]}
    assert status["kv"] == ("failed", runner.memory_error_line(RuntimeError(no_memory), "profile"))
    assert status["kv"][1].startswith("out of memory (one allocation of 52.7 GB); give --batch-size 1")
    assert all(status[n][0] == "done" for n in ("contextwise", "bayes-fit", "niah", "passkey", "attention"))
    assert doc["estimated_seconds"] > 0


def test_a_long_estimate_names_a_context_that_fits():
    from contextlab.profile.estimate import estimate_line

    how = "(from a timed forward pass and a timed refit; rough"
    assert (
        estimate_line(100.0, 4096)
        == f"estimated time on this machine: about 2 min for the evaluations {how})"
    )
    assert estimate_line(100.0, 4096, pair=True).endswith(  # a pair profile took twice its estimate
        f"{how}; the pairing of the two models and the report come after it)"
    )
    assert estimate_line(100.0, 4096, pair=True, pairing=40.0).endswith(
        f"{how}; then about 40 s pairing the two models, and the report)"
    )
    line = estimate_line(3 * 3600.0, 32768)  # 3 h: 1/64 of the context is 2.8 min
    assert line.endswith(f"about 3.0 h for the evaluations {how}); --context 512 would take about 3 min")


def test_the_estimate_counts_the_bootstrap_of_the_fit():
    """The Bayes-risk fit's thousand bootstrap refits ran after its forward passes, uncounted and with no
    bar: a random model's profile said 14.5 s and took 137 s, 110 of them in bayes-fit. The refit is
    timed on this machine and counted, per fit and for the pair's comparison."""
    from contextlab.eval import bayes_fit
    from contextlab.profile.estimate import pairing_seconds, refit_seconds
    from contextlab.profile.plan import Rates, Step

    refit = refit_seconds()
    assert 0 < refit < 1.0
    rates = Rates(base=1e-6, per_length=0.0, row=1e-6, refit=refit)
    fit = Step("bayes-fit", None, "S", 1000.0, 100.0, refits=bayes_fit.FIT_RESAMPLES)
    plain = Step("bayes-fit", None, "S", 1000.0, 100.0)
    assert fit.seconds(rates) - plain.seconds(rates) == pytest.approx(bayes_fit.FIT_RESAMPLES * refit)
    assert pairing_seconds(refit) == pytest.approx(2 * bayes_fit.FIT_RESAMPLES * refit)
    from tests.eval.conftest import byte_adapter, tiny_gpt

    adapter = byte_adapter(tiny_gpt(0, context=256))
    steps = build(
        256, BUDGETS["quick"], adapter, store="S", haystack=None, kv_file="K", kv_pairs=4, attention=""
    )
    assert next(s for s in steps if s.name == "bayes-fit").refits == bayes_fit.FIT_RESAMPLES


def test_a_sliding_window_shorter_than_the_context_is_said_with_the_layers_it_covers():
    """A Mistral with a 128-token window profiled at 4,096 gave curves and needle depths that read as the
    model's; the opening lines now say its layers see 128 tokens back (all of them, or Gemma 2's half)."""
    from types import SimpleNamespace

    import transformers

    from contextlab.profile.runner import window_note

    def note(config, kind="hf", context=4096):
        return window_note(
            SimpleNamespace(model=SimpleNamespace(config=config), info=SimpleNamespace(kind=kind)), context
        )

    mistral = transformers.MistralConfig(sliding_window=128, num_hidden_layers=2)
    assert note(mistral).startswith("attends at most 128 tokens back in each of its layers (sliding window)")
    assert note(mistral, context=128) == "" and note(mistral, kind="contextlab") == ""
    gemma2 = transformers.Gemma2Config(num_hidden_layers=4, sliding_window=512)
    assert note(gemma2).startswith("attends at most 512 tokens back in 2 of its layers")
    assert note(transformers.Qwen2Config(sliding_window=64, use_sliding_window=False)) == ""
    assert note(transformers.LlamaConfig()) == ""
    # the note was said on the console only: every result records the window, the page says it
    from contextlab.eval.results import attention_window
    from contextlab.report.evals import _model_line
    from contextlab.report.profile import profile_sections

    def window(config):
        return attention_window(
            SimpleNamespace(model=SimpleNamespace(config=config), info=SimpleNamespace(kind="hf"))
        )

    assert window(mistral) == {"sliding_window": 128, "sliding_layers": 2}
    assert (
        window(gemma2) == {"sliding_window": 512, "sliding_layers": 2}
        and window(transformers.LlamaConfig()) is None
    )
    doc = {"model": {"path": "/m", "kind": "hf", "context": 4096, **window(mistral)}}
    assert _model_line(doc) == "model /m (hf, context 4096, attends 128 tokens back in 2 layers)"
    profile = {
        "models": [{"label": "m", "path": "/m", "results": "models/m"}],
        "model_notes": {"m": note(mistral)},
    }
    assert "attends at most 128 tokens back in each of its layers" in "".join(
        profile_sections(Path("/nowhere"), profile)
    )


def test_doc_start_cuts_a_text_file_of_many_articles_into_documents(runs, tmp_path):
    """WikiText's test split is one file of 62 articles: profiled as is, every target came from one
    document and no context gain had an interval. --doc-start cuts it as data ingest does; given with a
    token store (already cut) it is refused in one line."""
    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.profile.data import prepare_store

    play = shakespeare(3_000)
    wiki = tmp_path / "wiki.test.raw"
    wiki.write_text("".join(f" = Article {i} = \n{play[i * 1000 : (i + 1) * 1000]}\n" for i in range(3)))
    adapter = load_model(runs[0])
    store = prepare_store(str(wiki), adapter, tmp_path / "p", False, doc_start=r"^ = [^=]")
    assert len(TokenStore(store).lengths()) == 3
    assert len(TokenStore(prepare_store(str(wiki), adapter, tmp_path / "q", False)).lengths()) == 1
    with pytest.raises(
        UserError, match=r"--doc-start cuts text, and --data .* is a token store, already cut"
    ):
        prepare_store(store, adapter, tmp_path / "r", False, doc_start=r"^ = [^=]")


def test_text_changed_before_any_step_is_ingested_again_and_after_one_is_refused(runs, tmp_path):
    from contextlab.data.store import TokenStore
    from contextlab.eval import load_model
    from contextlab.profile.data import prepare_store

    adapter = load_model(str(runs[0]))
    folder = tmp_path / "text"
    folder.mkdir()
    (folder / "a.txt").write_text(shakespeare(1_000))
    out = tmp_path / "p"
    store = prepare_store(str(folder), adapter, out, False)
    assert TokenStore(store).n_tokens == 1_000
    (folder / "b.txt").write_text(
        shakespeare(500)
    )  # changed while no step has read the store: ingested again
    assert prepare_store(str(folder), adapter, out, False) == store and TokenStore(store).n_tokens == 1_500
    (folder / "b.txt").write_text(shakespeare(700))
    with pytest.raises(UserError, match="has changed since this profile"):
        prepare_store(str(folder), adapter, out, False, measured=True)
    assert TokenStore(store).n_tokens == 1_500  # what the measured steps read is left as it was


def test_a_pair_is_measured_past_the_shorter_context_when_asked(tmp_path, text, capsys):
    """A base model (context 32) and its extension (context 64) were only ever measured at 32, where the
    extension's new positions are never read: --context 64 reads both at 64, the base past its own
    context (RoPE extrapolation), said in a note; a model of absolute positions is refused there."""
    from types import SimpleNamespace

    from contextlab.profile.runner import _checked

    models = []
    for seed, ctx in ((0, 32), (1, 64)):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32, context=ctx))
        write_untrained_run(tmp_path / f"c{ctx}", model, ByteTokenizer(), note="random init")
        models.append(tmp_path / f"c{ctx}")
    out = tmp_path / "p"
    argv = ["profile", "--model", str(models[0]), "--compare", str(models[1]), "--data", str(text)]
    argv += ["--out", str(out), "--no-progress", "--threads", "1", "--budget", "quick", "--context", "64"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContextLengthWarning)  # the base is read past its context: asked for
        assert main(argv) == 0
    said = capsys.readouterr().out
    assert "note: --context 64 reads" in said and "past the context it was trained at (32)" in said
    for label in ("c32", "c64"):
        cw = json.loads((out / "models" / label / "contextwise.json").read_text())
        assert cw["options"]["length"] == 65  # both read at 64 visible tokens: the results pair
    paired = json.loads((out / "compare" / "compare_contextwise.json").read_text())
    assert paired["results"]["n_pieces"] > 0  # paired piece by piece at context 64

    def fake(context, beyond):
        adapter = SimpleNamespace(
            context=context,
            require_lm=lambda what: None,
            info=SimpleNamespace(tokenizer={"hash": "t"}, extends_beyond=beyond),
        )
        return SimpleNamespace(adapter=adapter, path=f"m{context}", label=f"m{context}")

    with pytest.raises(UserError, match=r"runs past m32's context \(32\), and its positions are absolute"):
        _checked([fake(32, False), fake(64, True)], str(text), "all", 64)
    with pytest.raises(UserError, match=r"not between 1 and the longer of the two models' contexts \(64\)"):
        _checked([fake(32, True), fake(64, True)], str(text), "all", 65)
    assert _checked([fake(32, True), fake(64, True)], str(text), "all", 0) == 32  # the default: the smaller


def test_a_headline_of_too_few_candidate_sets_names_no_winner():
    """A user's pair profile named `bag_cache` better on niah from 9 candidate sets and 3 discordant
    prompts (+0.067 [+0.022, +0.133], McNemar p 0.25): a bootstrap over so few is too narrow."""
    from contextlab.report.profile import better

    h = {"better": "higher", "diff": 0.067, "ci95": [0.022, 0.133]}
    assert better(h, "llama_copy", "bag_cache") == "bag_cache (higher is better)"
    assert better({**h, "few_clusters": 9}, "llama_copy", "bag_cache") == (
        "too few sets to tell (bag_cache ahead) (higher is better)"
    )
    tied = {"better": "higher", "diff": 0.0, "ci95": [0.0, 0.0], "few_clusters": 8}  # 0.200 and 0.200
    assert better(tied, "gpt", "clm2") == "too few sets to tell (equal here) (higher is better)"


def test_a_profile_of_text_with_latin1_files_reads_them_with_encoding(runs, tmp_path, capsys):
    """The State of the Union folder has Latin-1 files: profile's error said to run again with
    --encoding latin-1, an option profile did not have. It has it now, for its store and its haystack."""
    from contextlab.cli import main
    from contextlab.data.store import TokenStore
    from contextlab.eval.adapter import load_model
    from contextlab.profile.data import prepare_store
    from contextlab.profile.plan import build

    folder = tmp_path / "speeches"
    folder.mkdir()
    (folder / "a.txt").write_text(shakespeare(2_000))
    (folder / "b.txt").write_bytes("Se\xf1or ".encode("latin-1") + shakespeare(2_000).encode())
    adapter = load_model(runs[0])
    with pytest.raises(
        UserError, match=r"b.txt \(byte 2\); nothing was tokenized: run again with --encoding"
    ):
        prepare_store(str(folder), adapter, tmp_path / "p", False)
    store = prepare_store(str(folder), adapter, tmp_path / "p", False, encoding="latin-1")
    assert len(TokenStore(store).lengths()) == 2
    assert TokenStore(store).meta["source"]["options"]["encoding"] == "latin-1"
    from contextlab.profile import BUDGETS

    steps = build(
        256,
        BUDGETS["quick"],
        adapter,
        store=store,
        haystack=str(folder),
        kv_file=None,
        kv_pairs=4,
        attention="",
        encoding="latin-1",
    )
    niah = next(s for s in steps if s.name == "niah")
    assert niah.options.encoding == "latin-1"
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    assert "--encoding {strict,replace,skip,latin-1}" in capsys.readouterr().out
    from typing import get_args

    from contextlab.data.sources import Encoding

    assert "{" + ",".join(get_args(Encoding)) + "}" == "{strict,replace,skip,latin-1}"  # ingest's own


def test_a_config_that_names_no_position_limit_is_said_and_recorded(llama, tmp_path):
    """A user's Llama of 300 positions whose config.json lacked max_position_embeddings was profiled at
    2,048 (LlamaConfig's default) without a word."""
    from types import SimpleNamespace

    from contextlab.eval.adapter import load_model
    from contextlab.eval.results import model_record
    from contextlab.profile.runner import model_notes

    bare = shutil.copytree(llama, tmp_path / "no-limit")
    cfg = json.loads((bare / "config.json").read_text())
    del cfg["max_position_embeddings"]
    (bare / "config.json").write_text(json.dumps(cfg))
    with pytest.warns(ContextLengthWarning, match=r"names no position limit .*taken to be 2,048.*--context"):
        adapter = load_model(str(bare))
    assert adapter.context == 2048 and model_record(adapter)["assumed_context"] is True
    notes = model_notes([SimpleNamespace(label="no-limit", adapter=adapter)], 2048)
    assert "its config.json names no position limit" in notes["no-limit"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        named = load_model(str(llama))  # 512 positions named: nothing to say, nothing recorded
    assert "assumed_context" not in model_record(named)
    assert model_notes([SimpleNamespace(label="tiny-llama", adapter=named)], 512) == {}


def test_the_profile_bar_moves_while_a_step_runs_and_never_past_the_step():
    """The profile's bar sat at 0% through a 45-second first step, its estimate printed."""
    import io
    import time

    from tqdm import tqdm

    from contextlab.profile.runner import advancing

    bar = tqdm(total=20.0, file=io.StringIO())
    with advancing(bar, 10.0, every=0.02):
        time.sleep(0.3)
        during = bar.n
    assert 0.1 < during < 9.5 and bar.n == pytest.approx(10.0)
    with advancing(bar, 0.05, every=0.02):  # a step longer than its estimate stops short of its share
        time.sleep(0.2)
        assert bar.n == pytest.approx(10.0 + 0.95 * 0.05)
    assert bar.n == pytest.approx(10.05)

"""Continued pretraining: start from a contextlab run or a local Hugging Face Llama, extend the
context with RoPE scaling, train, resume exactly, export back, reload with equal logits."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
import transformers

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.eval.adapter import ContextLengthWarning, load_model
from contextlab.inference import read_checkpoint
from contextlab.train.config import RunConfig
from contextlab.train.export import export_checkpoint
from contextlab.train.trainer import train
from tests.conftest import shakespeare

BASE = {
    "model": {"size": "tiny-4x256", "n_layer": 2, "n_head": 2, "n_embd": 32},
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    "train": {
        "context": 16,
        "tokens_per_step": 128,
        "log_every": 1,
        "val_every": 0,
        "val_tokens": 64,
        "ckpt_every": 3,
        "keep_last": 2,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}


def run_config(store, out_dir, *, train=None, **sections) -> RunConfig:
    data = json.loads(json.dumps(BASE))
    data["data"]["store"] = str(store.path)
    data["train"].update(out_dir=str(out_dir), **(train or {}))
    for k, v in sections.items():
        data.setdefault(k, {}).update(v)
    return from_dict(RunConfig, data)


def continue_llama(store, run, llama_dir, method: str, steps: int):
    """The tiny Llama (16 positions) continued at context 32 with ``extend.method`` ``method``."""
    sections = dict(init={"source": str(llama_dir)}, extend={"method": method})
    return train(
        run_config(store, run, train={"context": 32, "max_steps": steps, "ckpt_every": 2}, **sections)
    )


def losses(run_dir) -> dict[int, float]:
    return {
        r["step"]: r["loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    }


@pytest.fixture(scope="module")
def text():
    return shakespeare(60_000)


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory, text):
    """A small byte-level BPE tokenizer.json (what a Hugging Face model folder ships)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [text],
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, hf_tokenizer):
    """A tiny Llama built locally (save_pretrained), context 16, with its tokenizer."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=320,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    )
    out = tmp_path_factory.mktemp("llama") / "tiny-llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    shutil.copy(hf_tokenizer, out / "tokenizer.json")
    return out


@pytest.fixture(scope="module")
def hf_store(tmp_path_factory, text, hf_tokenizer):
    src = tmp_path_factory.mktemp("src") / "shakes.txt"
    src.write_text(text)
    out = tmp_path_factory.mktemp("store") / "shakes_hf"
    return ingest(src, out, IngestConfig(tokenizer=f"hf:{hf_tokenizer}"), progress=False).store


@pytest.fixture(scope="module")
def byte_store(tmp_path_factory, text):
    src = tmp_path_factory.mktemp("src") / "shakes.txt"
    src.write_text(text)
    return ingest(src, tmp_path_factory.mktemp("store") / "shakes", IngestConfig(), progress=False).store


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, byte_store):
    """A contextlab GPT pretrained at context 16."""
    out = tmp_path_factory.mktemp("runs") / "base"
    train(run_config(byte_store, out, train={"max_steps": 12, "ckpt_every": 12}))
    return out


def ids(T: int, vocab: int, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, vocab, (2, T), generator=torch.Generator().manual_seed(seed))


def test_hf_llama_continues_with_yarn_exports_and_reloads(tmp_path, hf_store, llama_dir, capsys):
    run = tmp_path / "llama_run"
    res = continue_llama(hf_store, run, llama_dir, "yarn", steps=4)
    assert res.steps == 4 and all(torch.isfinite(torch.tensor(list(losses(run).values()))))
    assert (
        "RoPE extended (yarn, factor 2) from the model's context 16 to train.context 32"
        in capsys.readouterr().out
    )
    state = json.loads((run / "checkpoints" / "step_000004" / "state.json").read_text())
    assert state["arch"] == "hf" and state["init"]["kind"] == "hf" and state["init"]["factor"] == 2.0
    rope = state["model_config"]["rope_parameters"]
    assert (
        rope["rope_type"] == "yarn"
        and rope["factor"] == 2.0
        and rope["original_max_position_embeddings"] == 16
    )

    trained = read_checkpoint(run).build()
    source = transformers.AutoModelForCausalLM.from_pretrained(llama_dir)
    w = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(trained.state_dict()[w], source.state_dict()[w])  # it trained

    out = export_checkpoint(run, tmp_path / "export")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["rope_parameters"]["rope_type"] == "yarn"
    assert cfg["max_position_embeddings"] == 32 and (out / "tokenizer.json").is_file()
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    x = ids(32, 300)
    ours = load_model(run).logits(x)  # contextlab's view of its own checkpoint
    with torch.no_grad():
        theirs = reloaded(input_ids=x).logits
    assert torch.allclose(ours, theirs[..., : ours.size(-1)], atol=1e-5)
    exported = load_model(out)  # the export evaluates as an ordinary HF folder, with its tokenizer
    assert exported.info.kind == "hf" and exported.info.context == 32
    assert torch.allclose(exported.logits(x), ours, atol=1e-5)


def test_a_rope_model_continued_longer_without_extension_exports_the_context_it_trained_at(
    tmp_path, hf_store, llama_dir
):
    """A user's Llama of 256 positions trained at 512 with extend.method=none exported as a 256-position
    model: its export was read at 256 by default, and at 512 said "trained at context 256"."""
    run = tmp_path / "plain"
    continue_llama(hf_store, run, llama_dir, "none", steps=2)
    out = export_checkpoint(run, tmp_path / "export")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 32 and (cfg.get("rope_parameters") or {}).get("rope_type") in (
        None,
        "default",
    )
    assert load_model(out).info.context == 32 == load_model(run).info.context
    x = ids(32, 300)
    assert torch.allclose(load_model(out).logits(x), load_model(run).logits(x), atol=1e-5)


def test_continued_hf_run_resumes_exactly(tmp_path, hf_store, llama_dir):
    sections = dict(init={"source": str(llama_dir)}, extend={"method": "pi"})
    ref = tmp_path / "ref"
    train(run_config(hf_store, ref, train={"context": 32, "max_steps": 6}, **sections))
    crashed = tmp_path / "crashed"
    shutil.copytree(ref, crashed)  # as if killed after the step-3 checkpoint
    shutil.rmtree(crashed / "checkpoints" / "step_000006")
    train(run_config(hf_store, crashed, train={"context": 32, "max_steps": 6}, **sections))
    assert losses(crashed) == losses(ref)  # bitwise, steps 4-6 recomputed
    a = read_checkpoint(ref).build()
    b = read_checkpoint(crashed).build()
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())


def test_contextlab_run_continues_with_yarn_and_exports(tmp_path, byte_store, base_run, capsys):
    run = tmp_path / "extended"
    train(
        run_config(
            byte_store,
            run,
            train={"context": 64, "max_steps": 3},
            init={"source": str(base_run)},
            extend={"method": "yarn"},
        )
    )
    assert (
        "RoPE extended (yarn, factor 4) from the model's context 16 to train.context 64"
        in capsys.readouterr().out
    )
    fresh = tmp_path / "fresh"
    train(run_config(byte_store, fresh, train={"context": 64, "max_steps": 3}))
    assert losses(run)[1] < losses(fresh)[1] - 0.5  # starts from the pretrained weights
    ckpt = read_checkpoint(run)
    model, state = ckpt.build(), ckpt.state
    c = model.config
    assert (c.context, c.rope_extension, c.rope_factor, c.rope_original_context) == (64, "yarn", 4.0, 16)
    assert state["init"]["step"] == 12 and state["init"]["extension"] == "yarn"

    out = export_checkpoint(run, tmp_path / "export")
    import contextlab.models.hf  # noqa: F401  (registers contextlab-gpt)

    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    x = ids(80, 257)
    with torch.no_grad():
        assert torch.allclose(model(x).logits, reloaded(input_ids=x).logits, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        load_model(run).token_logprobs(ids(65, 257))  # within the extended context: no warning


def test_evaluating_beyond_the_context_warns(base_run):
    adapter = load_model(base_run)  # trained at 16, not extended
    with pytest.warns(
        ContextLengthWarning, match="trained at context 16 and its RoPE was not extended to 40"
    ):
        adapter.token_logprobs(ids(41, 257))


def test_base_change_other_objective_and_freezing(tmp_path, byte_store, base_run):
    run = tmp_path / "mtp"
    train(
        run_config(
            byte_store,
            run,
            train={"context": 32, "max_steps": 2},
            init={"source": str(base_run), "freeze": ["embeddings", "blocks.0.*"]},
            extend={"method": "base", "rope_base": 1e6},
            objective={"name": "mtp"},
        )
    )
    ckpt = read_checkpoint(run)
    model, state = ckpt.build(), ckpt.state
    base = read_checkpoint(base_run).build()
    assert state["arch"] == "mtp" and model.config.rope_base == 1e6 and model.config.rope_extension == "none"
    after, before = model.state_dict(), base.state_dict()
    assert torch.equal(after["wte.weight"], before["wte.weight"])  # frozen
    assert torch.equal(after["blocks.0.attn.qkv.weight"], before["blocks.0.attn.qkv.weight"])
    assert not torch.equal(after["blocks.1.attn.qkv.weight"], before["blocks.1.attn.qkv.weight"])  # trained


def test_user_errors_are_one_clear_line(tmp_path, byte_store, hf_store, base_run, llama_dir):
    def check(match, store=byte_store, **sections):
        with pytest.raises(UserError, match=match):
            train(
                run_config(store, tmp_path / "err", train=sections.pop("train", {"max_steps": 1}), **sections)
            )

    check("is not longer than the model's context", init={"source": str(base_run)}, extend={"method": "pi"})
    check(
        r"config key 'extend.method' must be 'none' \| 'pi' \| 'ntk' \| 'yarn' \| 'base', got 'rope'",
        init={"source": str(base_run)},
        extend={"method": "rope"},
        train={"context": 32, "max_steps": 1},
    )
    check("needs the new base", init={"source": str(base_run)}, extend={"method": "base"})
    check("matches no parameter", init={"source": str(base_run), "freeze": ["nothing.*"]})
    check("was not tokenized with the tokenizer of", init={"source": str(llama_dir)})
    check(
        "trains the mtp architecture",
        store=hf_store,
        init={"source": str(llama_dir)},
        objective={"name": "mtp"},
    )
    check(
        "needs an attention mask", store=hf_store, init={"source": str(llama_dir)}, objective={"name": "mlm"}
    )
    check("does not exist", init={"source": str(tmp_path / "nowhere")})


def test_a_hugging_face_source_with_damaged_weights_is_one_line(tmp_path, hf_store, llama_dir):
    """A weights file cut short raised safetensors' own error through train (a 45-line traceback;
    eval said it in one line)."""
    bad = tmp_path / "cut"
    shutil.copytree(llama_dir, bad)
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:2000])
    with pytest.raises(UserError, match=r"cannot load the model in .*cut \(.*\); its weights may be damaged"):
        train(run_config(hf_store, tmp_path / "r", train={"max_steps": 1}, init={"source": str(bad)}))


def test_an_extended_limit_counts_the_bos_a_tokenizer_puts_first():
    """Rows of a tokenizer that adds a BOS are BOS + train.context tokens: the extended position limit is
    one more, so the export reads back at the context the run trained at (it read one short: 511 of 512)."""
    from contextlab.models.hf.causal import context_limit, extend_hf_rope

    for lead, limit in ((0, 64), (1, 65)):
        cfg = transformers.LlamaConfig(
            hidden_size=32, num_attention_heads=4, max_position_embeddings=16, rope_theta=1e4
        )
        extend_hf_rope(cfg, "yarn", 4.0, 16, 64, lead=lead)
        assert context_limit(cfg) == limit


def test_command_line_flag_sets_the_source(tmp_path, byte_store, capsys):
    from contextlab.cli import main

    rc = main(
        [
            "train",
            "--init-from",
            str(tmp_path / "no model"),
            "--set",
            f"data.store={byte_store.path}",
            "--set",
            f"train.out_dir={tmp_path / 'run'}",
            "--set",
            "train.max_steps=1",
        ]
    )
    assert rc != 0 and f"init.source {tmp_path / 'no model'} does not exist" in capsys.readouterr().err


def test_a_store_ingested_before_the_id_hash_continues_a_hf_model(tmp_path, hf_store, llama_dir):
    """Stores ingested before tokenizer identity hashed the ids recorded the raw file's hash."""
    from contextlab.data.store import TokenStore
    from contextlab.data.tokenizers import HFTokenizer
    from contextlab.train.init_from import _check_hf_tokenizer

    old = tmp_path / "old_store"
    shutil.copytree(hf_store.path, old)
    tok = HFTokenizer.from_file(llama_dir / "tokenizer.json")
    assert tok.legacy_hash != tok.hash
    for f in (old / "meta.json", old / "tokenizer" / "tokenizer_spec.json"):
        doc = json.loads(f.read_text())
        spec = doc["tokenizer"] if f.name == "meta.json" else doc
        spec["hash"] = tok.legacy_hash
        spec.pop("legacy_hash", None)
        f.write_text(json.dumps(doc))
    store = TokenStore(old)
    assert store.tokenizer_hash == tok.legacy_hash
    _check_hf_tokenizer(llama_dir, store, 320)  # accepted: the same tokenizer.json, the same ids


def test_a_contextlm_export_keeps_the_runs_tokenizer(tmp_path, byte_store, capsys):
    """A ContextLM export opens as the ContextLM it was, with the run's byte tokenizer (not the
    export folder's tokenizer.json under the folder's name), so eval and --init-from accept it
    with the run's byte store, as they accept a GPT export."""
    from contextlab.cli import main
    from contextlab.inference import open_model
    from contextlab.models.contextlm import ContextLM

    run = tmp_path / "ctx"
    train(run_config(byte_store, run, train={"max_steps": 2}, objective={"name": "contextlm"}))
    out = export_checkpoint(run, tmp_path / "exported ctx")
    model, tok, info = open_model(out)
    assert type(model) is ContextLM and info.kind == "contextlab" and info.objective == "contextlm"
    assert tok.hash == info.tokenizer["hash"] == byte_store.tokenizer_hash
    x = ids(16, 257)
    with torch.no_grad():
        assert torch.equal(model(x).logits, read_checkpoint(run).build()(x).logits)

    args = ["--model", str(out), "--data", str(byte_store.path), "--out", str(tmp_path / "ev")]
    assert main(["eval", "ppl", *args, "--max-tokens", "256", "--no-progress"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "ev" / "ppl.json").read_text())["model"]["kind"] == "contextlab"

    again = tmp_path / "again"
    train(
        run_config(
            byte_store,
            again,
            train={"max_steps": 1},
            init={"source": str(out)},
            objective={"name": "contextlm"},
        )
    )
    state = read_checkpoint(again).state
    assert state["init"]["kind"] == "contextlab-export" and state["arch"] == "contextlm"


def test_a_fim_export_names_its_sentinels_for_transformers(tmp_path, byte_store):
    """AutoTokenizer on a FIM export knows the sentinels at the ids the model trained with, and
    contextlab still reads the export with the run's byte store."""
    from transformers import AutoTokenizer

    from contextlab.inference import open_model
    from contextlab.models.special_tokens import FIM_SENTINELS

    run = tmp_path / "fim"
    train(
        run_config(
            byte_store, run, train={"max_steps": 1}, objective={"name": "fim"}, model={"mlp": "swiglu"}
        )
    )
    out = export_checkpoint(run, tmp_path / "fim export")
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == json.loads((out / "config.json").read_text())["vocab_size"] == 260
    assert tok.convert_tokens_to_ids(list(FIM_SENTINELS)) == [257, 258, 259]
    assert tok("<|fim_prefix|>ab<|fim_suffix|>c<|fim_middle|>").input_ids == [257, 97, 98, 258, 99, 259]
    assert tok.decode([257, 97, 259], skip_special_tokens=True) == "a"
    _, _, info = open_model(out)
    assert info.tokenizer["hash"] == byte_store.tokenizer_hash and info.objective == "fim"


def test_a_continued_hf_fim_export_names_its_sentinels_and_keeps_the_data_tokenizer(
    tmp_path, hf_store, llama_dir
):
    """A Hugging Face model continued with FIM was exported with its source's tokenizer files as they
    were: transformers read "<|fim_prefix|>" as text, not the ids 300..302 the model trained with. The
    export names them; contextlab still reads it (and continues it) with the store's tokenizer."""
    from transformers import AutoTokenizer

    from contextlab.inference import open_model
    from contextlab.models.special_tokens import FIM_SENTINELS

    run = tmp_path / "fim"
    train(
        run_config(
            hf_store, run, train={"max_steps": 1}, init={"source": str(llama_dir)}, objective={"name": "fim"}
        )
    )
    out = export_checkpoint(run, tmp_path / "fim export")
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids(list(FIM_SENTINELS)) == [300, 301, 302]
    ids = tok("<|fim_prefix|>ab<|fim_suffix|>c<|fim_middle|>").input_ids
    assert [i for i in ids if i >= 300] == [300, 301, 302]
    assert tok.decode(ids, skip_special_tokens=True) == "abc"
    _, own, info = open_model(out)
    assert own.hash == hf_store.tokenizer_hash and own.vocab_size == 300
    assert info.objective == "fim" and info.step == 1  # the infill eval asks it with its sentinels
    again = tmp_path / "again"
    train(run_config(hf_store, again, train={"max_steps": 1}, init={"source": str(out)}))
    assert read_checkpoint(again).state["init"]["source"] == str(out.resolve())


def test_a_continued_run_whose_source_moved_says_the_resume_needs_it(tmp_path, byte_store, base_run):
    """It said 'init.source ... does not exist; pass a contextlab run/checkpoint or a Hugging Face
    folder', as to a first start, where the run needs that source back to resume."""
    src = tmp_path / "base"
    shutil.copytree(base_run, src)
    cfg = lambda: run_config(byte_store, tmp_path / "cont", train={"max_steps": 2}, init={"source": str(src)})
    train(cfg())
    shutil.move(src, tmp_path / "elsewhere")
    with pytest.raises(UserError, match=r"was started from it: a resume builds the model from its source"):
        train(cfg())


def test_a_source_of_another_tokenizer_names_the_spec_that_ingests_with_its_own(
    tmp_path, hf_store, base_run, text
):
    """The fix said '--tokenizer store:STORE' without naming a store; a run carries its tokenizer, so the
    line names it, and that spec ingests the data with the run's tokenizer."""
    with pytest.raises(UserError) as err:
        train(run_config(hf_store, tmp_path / "r", train={"max_steps": 1}, init={"source": str(base_run)}))
    spec = f"dir:{base_run / 'tokenizer'}"
    assert f"--tokenizer {spec} --out STORE" in str(err.value)
    (tmp_path / "t.txt").write_text(text)
    redone = ingest(
        tmp_path / "t.txt", tmp_path / "again", IngestConfig(tokenizer=spec), progress=False
    ).store
    assert (
        train(
            run_config(redone, tmp_path / "r", train={"max_steps": 1}, init={"source": str(base_run)})
        ).steps
        == 1
    )


def test_a_continued_run_of_absolute_positions_is_not_read_past_them(
    tmp_path, hf_store, hf_tokenizer, llama_dir
):
    """A contextlab run continuing a GPT-2 was marked as extending beyond its context, as any continued
    Hugging Face run was, so evaluations (and profile --context) ran it past its position table; the
    flag now follows its config: absolute positions refuse, a Llama's RoPE extrapolates."""
    from contextlab.eval import load_model

    gpt2 = tmp_path / "gpt2"
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=320, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    ).save_pretrained(gpt2)
    shutil.copy(hf_tokenizer, gpt2 / "tokenizer.json")
    for src, name in ((gpt2, "g"), (llama_dir, "l")):
        train(
            run_config(
                hf_store, tmp_path / name, train={"context": 16, "max_steps": 1}, init={"source": str(src)}
            )
        )
    assert not load_model(tmp_path / "g").info.extends_beyond
    assert load_model(tmp_path / "l").info.extends_beyond


def test_an_extension_factor_that_does_not_fit_the_context_is_said(capsys):
    """extend.factor 4 with a model of 256 positions trained at 512 was accepted in silence, and
    transformers warned on loading the export that the factor and the limit disagree."""
    from types import SimpleNamespace

    from contextlab.train.init_from import resolve_extension

    ext = SimpleNamespace(method="yarn", factor=4.0, rope_base=0.0)
    assert resolve_extension(ext, 256, 512) == ("yarn", 4.0)
    said = capsys.readouterr().out
    assert "note: extend.factor 4 scales the model's 256 positions for 1,024" in said
    assert "train.context 512 needs factor 2" in said
    for fitting in (
        SimpleNamespace(method="yarn", factor=2.0, rope_base=0.0),
        SimpleNamespace(**{**vars(ext), "factor": 0}),
    ):
        assert resolve_extension(fitting, 256, 512) == ("yarn", 2.0)
    assert capsys.readouterr().out == ""

"""Exports load as they are in a process that cannot import contextlab.

Each kind (Llama-shape GPT, GELU GPT, ContextLM, MTP) is exported with a byte tokenizer; a
fresh ``python -I`` whose import system refuses ``contextlab`` loads every folder with
``AutoModelForCausalLM`` (trust_remote_code only where the folder carries code) and
``AutoTokenizer``, and reports logits, greedy generations and token ids, which are compared
here with what contextlab computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from contextlab.data.tokenizer_base import ByteTokenizer
from contextlab.models import GPT, GPTConfig
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.hf.export import export_arch_to_hf
from contextlab.models.mtp import MTPConfig, MTPModel
from tests.conftest import GPT2_DIR, shakespeare

VOCAB, CONTEXT, NEW = 257, 32, 6
SHAPE = {"vocab_size": VOCAB, "n_layer": 2, "n_head": 2, "n_embd": 64, "context": CONTEXT}
TEXT = "Hello, wörld!<|endoftext|>next"

# Runs in the fresh process: contextlab must not be importable there.
CHILD = r"""
import importlib.abc, json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

class NoContextlab(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "contextlab":
            raise ImportError("contextlab is hidden from this process")

sys.meta_path.insert(0, NoContextlab())
try:
    import contextlab  # noqa: F401
    raise SystemExit("contextlab is importable in the fresh process")
except ImportError:
    pass
torch.set_num_threads(1)
results = {}
for folder in sys.argv[2:]:
    case = torch.load(folder + ".expected.pt")
    remote = case["remote"]
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=remote).eval()
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=remote)
    with torch.no_grad():
        diff = (model(case["x"]).logits - case["logits"]).abs().max().item()
        out = model.generate(case["prompt"], max_new_tokens=case["new"], do_sample=False,
                             pad_token_id=tok.pad_token_id)
    ids = tok(case["text"]).input_ids
    results[folder] = {
        "class": type(model).__name__, "max_diff": diff, "generated": out[0].tolist(), "ids": ids,
        "decoded": tok.decode(ids), "eos": tok.eos_token_id, "bos": tok.bos_token_id,
        "pad": tok.pad_token_id, "max_length": tok.model_max_length,
    }
json.dump(results, open(sys.argv[1], "w"))
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _noisy(model):
    """Move every norm weight, fusion gate and bias off its init, so each one is tested."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "fusion" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return model.eval()


def models() -> dict[str, tuple[torch.nn.Module, str]]:
    """kind -> (model, the model whose forward the export must reproduce)."""
    torch.manual_seed(0)
    llama = GPT(
        GPTConfig(**SHAPE, mlp="swiglu", tie_embeddings=False, rope_extension="yarn", rope_factor=2.0)
    )
    gelu = GPT(GPTConfig(**SHAPE, bias=True))
    contextlm = ContextLM(ContextLMConfig(**SHAPE, chunk_size=4, encoder_layers=1, predictor_layers=1))
    mtp = MTPModel(MTPConfig(**SHAPE, n_future=3))
    return {
        name: _noisy(m)
        for name, m in (("llama", llama), ("gelu", gelu), ("contextlm", contextlm), ("mtp", mtp))
    }


def _greedy(model, prompt: torch.Tensor, new: int) -> list[int]:
    seq = prompt
    with torch.no_grad():
        for _ in range(new):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    return seq[0].tolist()


def test_every_kind_loads_in_a_process_without_contextlab(tmp_path):
    tok = ByteTokenizer()
    tok.save(tmp_path / "tok")
    x = torch.randint(0, VOCAB, (2, 27), generator=torch.Generator().manual_seed(3))  # 27: a partial chunk
    folders, reference = [], {}
    for kind, model in models().items():
        folder = export_arch_to_hf(model, tmp_path / kind, tokenizer_dir=tmp_path / "tok")
        ref = model.to_gpt() if kind == "mtp" else model  # MTP exports its next-token model
        with torch.no_grad():
            logits = ref(x).logits
        remote = (folder / "modeling_contextlab.py").is_file()
        case = {"x": x, "logits": logits, "prompt": x[:1, :9], "new": NEW, "text": TEXT, "remote": remote}
        torch.save(case, f"{folder}.expected.pt")
        reference[str(folder)] = (kind, _greedy(ref, x[:1, :9], NEW), remote)
        folders.append(str(folder))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [sys.executable, "-I", "-c", CHILD, str(tmp_path / "out.json"), *folders],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads((tmp_path / "out.json").read_text())
    expected_class = {"llama": "LlamaForCausalLM", "contextlm": "ContextlabContextLMForCausalLM"}
    for folder, (kind, greedy, remote) in reference.items():
        got = results[folder]
        assert remote == (kind != "llama"), kind  # only the Llama shape ships without code
        assert got["class"] == expected_class.get(kind, "ContextlabGPTForCausalLM"), kind
        assert got["max_diff"] <= 1e-5, (kind, got["max_diff"])
        assert got["generated"] == greedy, kind
        assert got["ids"] == tok.encode("Hello, wörld!") + [256] + tok.encode("next"), kind
        assert got["decoded"] == TEXT
        assert got["eos"] == got["bos"] == got["pad"] == 256 and got["max_length"] == CONTEXT


def test_llama_config_and_weights_follow_llama_conventions(tmp_path):
    """Real vocabulary rows only, Llama's names, the RoPE extension as Llama's rope parameters."""
    from safetensors.torch import load_file

    torch.manual_seed(0)
    for ext, factor, rope in (
        ("none", 1.0, {"rope_type": "default", "rope_theta": 10000.0}),
        ("pi", 2.0, {"rope_type": "linear", "factor": 2.0}),
        ("ntk", 4.0, {"rope_type": "default", "rope_theta": 10000.0 * 4.0 ** (32 / 30)}),
    ):
        model = GPT(GPTConfig(**SHAPE, mlp="swiglu", rope_extension=ext, rope_factor=factor))
        out = export_arch_to_hf(model, tmp_path / ext)
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
        assert "auto_map" not in cfg and not (out / "modeling_contextlab.py").exists()
        assert cfg["tie_word_embeddings"] and cfg["rms_norm_eps"] == model.config.norm_eps
        for key, value in rope.items():
            expected = value if isinstance(value, str) else pytest.approx(value, rel=1e-12)
            assert cfg["rope_parameters"][key] == expected, (ext, key)
        weights = load_file(str(out / "model.safetensors"))
        assert weights["model.embed_tokens.weight"].shape == (VOCAB, 64)  # padded rows dropped
        assert torch.equal(
            weights["model.layers.0.mlp.gate_proj.weight"], model.blocks[0].mlp.up.weight[:192]
        )
        assert torch.equal(
            weights["model.layers.1.self_attn.v_proj.weight"], model.blocks[1].attn.qkv.weight[128:]
        )


@pytest.mark.parametrize("ext,factor", [("none", 1.0), ("pi", 4.0), ("ntk", 4.0), ("yarn", 4.0)])
def test_llama_export_reproduces_each_rope_extension(tmp_path, ext, factor):
    """Positions beyond the training context too, where the extensions differ most."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = _noisy(GPT(GPTConfig(**SHAPE, mlp="swiglu", rope_extension=ext, rope_factor=factor, bias=True)))
    llama = LlamaForCausalLM.from_pretrained(export_arch_to_hf(model, tmp_path / "m")).eval()
    x = torch.randint(0, VOCAB, (2, 100), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (llama(x).logits - model(x).logits).abs().max() <= 1e-5


def test_remote_code_defaults_are_the_model_config_defaults():
    """The shipped config file cannot import contextlab: its defaults must equal the dataclasses'."""
    import dataclasses

    from contextlab.models.contextlm import ContextLMOptions
    from contextlab.models.hf.remote import configuration_contextlab as remote

    gpt = {f.name: f.default for f in dataclasses.fields(GPTConfig) if f.name != "tie_embeddings"}
    assert gpt == remote.GPT_DEFAULTS
    assert {f.name: f.default for f in dataclasses.fields(ContextLMOptions)} == remote.CONTEXTLM_DEFAULTS


def test_shipped_modeling_files_import_only_torch_and_transformers():
    from contextlab.models.hf.remote import REMOTE_DIR, REMOTE_FILES

    for name in REMOTE_FILES:
        text = (REMOTE_DIR / name).read_text()
        imports = {
            line.split()[1].split(".")[0]
            for line in text.splitlines()
            if line.startswith(("import ", "from "))
        }
        assert imports <= {"math", "torch", "transformers", "", "configuration_contextlab"}, (name, imports)


def test_tokenizers_at_the_root_give_contextlab_ids(tmp_path):
    """gpt2 files and a trained BPE, beside the byte tokenizer of the test above."""
    from transformers import AutoTokenizer

    from contextlab.data.gpt2_tokenizer import GPT2Tokenizer
    from contextlab.data.hf_tokenizer import train_bpe
    from contextlab.models.hf.tokenizer import save_hf_tokenizer

    text = shakespeare(20000)
    head, tail = text[5000:6000], "  tabs\tand ünïcode 😀"
    for name, tok in (
        ("gpt2", GPT2Tokenizer.from_dir(GPT2_DIR)),
        ("bpe", train_bpe([text], 400)),
    ):
        tok.save(tmp_path / name)
        special = save_hf_tokenizer(tmp_path / name, tmp_path / f"{name}-hf", context=64)
        hf = AutoTokenizer.from_pretrained(tmp_path / f"{name}-hf")
        ids = hf(head + "<|endoftext|>" + tail).input_ids
        assert ids == tok.encode(head) + [tok.eot_id] + tok.encode(tail), name
        assert special["eos_token_id"] == hf.eos_token_id == hf.pad_token_id == tok.eot_id
        assert hf.model_max_length == 64


def test_contextlab_loads_its_llama_export_back_as_the_gpt(tmp_path):
    """Evaluation and init-from read a Llama-form export as the GPT it was, with its own tokenizer."""
    from contextlab.eval.adapter import load_model
    from contextlab.models.hf import gpt_from_hf_export

    torch.manual_seed(0)
    model = _noisy(GPT(GPTConfig(**SHAPE, mlp="swiglu", rope_extension="ntk", rope_factor=2.0)))
    ByteTokenizer().save(tmp_path / "tok")
    out = export_arch_to_hf(model, tmp_path / "m", tokenizer_dir=tmp_path / "tok")
    back = gpt_from_hf_export(out)
    assert back.config == model.config and back.lm_head.weight is back.wte.weight
    original = model.state_dict()
    for name, tensor in back.state_dict().items():
        rows = VOCAB if name in ("wte.weight", "lm_head.weight") else None  # padded rows are not exported
        assert torch.equal(tensor[:rows], original[name][:rows]), name
    x = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(back(x).logits, model(x).logits)
    adapter = load_model(out)
    assert adapter.info.kind == "contextlab" and adapter.info.tokenizer["hash"] == ByteTokenizer().hash


def test_added_tokens_are_named_in_every_tokenizer_file_that_lists_them(tmp_path):
    """A hub model's tokenizer_config.json lists its added tokens too (added_tokens_decoder, the
    additional special tokens): the objective's appended ones join both; a token whose text the
    tokenizer already knows at another id is refused, not written with a wrong id."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from contextlab.models.hf.tokenizer import name_added_tokens

    tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "<s>": 2}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.save(str(tmp_path / "tokenizer.json"))
    known = {"2": {"content": "<s>", "special": True}}
    config = {"added_tokens_decoder": known, "additional_special_tokens": ["<s>"]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    name_added_tokens(tmp_path, {"<|fim_prefix|>": 3, "<|fim_suffix|>": 4})
    back = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert [back.token_to_id(n) for n in ("<|fim_prefix|>", "<|fim_suffix|>")] == [3, 4]
    written = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert written["additional_special_tokens"] == ["<s>", "<|fim_prefix|>", "<|fim_suffix|>"]
    assert [written["added_tokens_decoder"][i]["content"] for i in ("2", "3", "4")] == [
        "<s>",
        "<|fim_prefix|>",
        "<|fim_suffix|>",
    ]
    with pytest.raises(ValueError, match="would get id 5, not 7"):
        name_added_tokens(tmp_path, {"<|fim_middle|>": 7})

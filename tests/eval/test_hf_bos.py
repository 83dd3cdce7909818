"""A Hugging Face model whose tokenizer puts a BOS before every text (Llama, Mistral, Gemma) is run with
it, as it was trained: every evaluation's input starts with the BOS, which is cut from every output, so
positions and context lengths still count text tokens only. Before, these models were scored on text
without their BOS (a Gemma reads such input as noise), and analyze attention read them the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contextlab.data.hf_tokenizer import HFTokenizer
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval.adapter import ModelAdapter, load_model
from contextlab.inference import ModelInfo
from tests.conftest import save_tiny_llama

BOS = 256


def _gpt2_adapter(lead: list[int]) -> ModelAdapter:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=258, n_positions=512, n_embd=32, n_layer=2, n_head=2))
    tok = ByteTokenizer()
    info = ModelInfo("gpt2", "hf", "-", "gpt2", 0, 511, False, tok.spec(), lm_prefix=lead)
    return ModelAdapter(model, tok, info, batch_size=2)


def _by_hand(model, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t] | BOS, ids[:, :t]) for t >= 1, the model run on BOS + ids."""
    full = torch.cat([torch.full((ids.size(0), 1), BOS), ids], dim=1)
    logits = model(input_ids=full).logits[:, 1:-1, :258].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]


@torch.no_grad()
def test_every_path_of_the_backend_reads_the_bos_first():
    adapter = _gpt2_adapter([BOS])
    ids = torch.randint(0, 256, (3, 17), generator=torch.Generator().manual_seed(1))
    want = _by_hand(adapter.model, ids)
    torch.testing.assert_close(adapter.token_logprobs(ids), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(adapter.last_token_logprobs(ids), want[:, -1], rtol=1e-5, atol=1e-5)
    feats, _ = adapter.features_and_last_logprob(ids, layer=1, position=-1)
    full = torch.cat([torch.full((3, 1), BOS), ids[:, :-1]], dim=1)
    states = adapter.model(input_ids=full, output_hidden_states=True).hidden_states[1][:, 1:]
    torch.testing.assert_close(feats, states[:, -1], rtol=1e-5, atol=1e-5)
    assert adapter.hidden_states(ids, layer=1).shape == (3, 17, 32)  # the BOS's state is cut
    prompt, cands = ids[0, :9].tolist(), [ids[0, 9:12].tolist(), ids[1, 3:7].tolist()]
    shared = adapter.score_continuations(prompt, cands)
    whole = adapter.score_spans([(prompt + c, len(prompt)) for c in cands])
    np.testing.assert_allclose(shared, whole, rtol=1e-5)
    np.testing.assert_allclose(whole[0], want[0, 8:11].double().sum().item(), rtol=1e-5)
    greedy, seq = [], [BOS, *prompt]
    for _ in range(5):
        greedy.append(int(adapter.model(input_ids=torch.tensor([seq])).logits[0, -1, :258].argmax()))
        seq.append(greedy[-1])
    assert adapter.generate(prompt, 5) == greedy
    plain = _gpt2_adapter([])  # the control: the same model without its BOS scores otherwise
    assert not torch.allclose(plain.token_logprobs(ids), want, atol=1e-3)


@pytest.fixture(scope="module")
def llama_with_bos(tmp_path_factory):
    """A tiny Llama folder whose tokenizer.json adds <s> before every text, as Llama's own does."""
    import transformers
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    folder = save_tiny_llama(tmp_path_factory.mktemp("hf") / "llama-bos", vocab=320, layers=2, chars=20_000)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens(["<s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    tok.save(str(folder / "tokenizer.json"))
    model = transformers.LlamaForCausalLM.from_pretrained(folder)
    model.resize_token_embeddings(tok.get_vocab_size(with_added_tokens=True))  # the BOS gets an embedding
    model.save_pretrained(folder)
    return folder, bos


def test_the_tokenizers_bos_is_found_and_given_to_every_input(llama_with_bos, tmp_path, capsys):
    folder, bos = llama_with_bos
    assert HFTokenizer.from_file(folder).leading_special_ids() == [bos]
    plain = save_tiny_llama(tmp_path / "plain", vocab=320, layers=1, chars=20_000)
    assert HFTokenizer.from_file(plain).leading_special_ids() == []  # a byte-level BPE adds nothing
    adapter = load_model(folder)
    assert adapter.info.lm_prefix == [bos] and adapter.info.context == 512 - 1  # the BOS takes a position
    said = capsys.readouterr().err
    assert "tokenizer puts <s> before every text, so every input starts with it" in said
    assert "(511 of its 512 positions)" in said
    load_model(folder)
    assert "<s>" not in capsys.readouterr().err  # said once per model in a process
    ids = torch.as_tensor([adapter.encode("To be, or not to be, that is the question.")])
    full = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    with torch.no_grad():
        logits = adapter.model(input_ids=full).logits[:, 1:-1].float()
    want = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(adapter.token_logprobs(ids), want, rtol=1e-5, atol=1e-5)


def test_analyze_attention_reads_the_bos_and_reports_its_share(llama_with_bos, tmp_path):
    """It was refused (a model with a prefix); now the text's attention is renormalised over the text
    and each layer's attention to the BOS is reported beside it."""
    from contextlab.cli import main

    folder, bos = llama_with_bos
    text = "Now is the winter of our discontent made glorious summer by this sun of York. " * 3
    out = tmp_path / "att"
    assert (
        main(
            [
                "analyze",
                "attention",
                "--model",
                str(folder),
                "--text",
                text,
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    doc = json.loads((out / "attention.json").read_text())
    part = doc["results"]["models"]["a"]
    shares = part["bos"]["share_by_layer"]
    assert part["bos"]["ids"] == [bos] and len(shares) == 2 and all(0 < s < 1 for s in shares)
    tokens = np.load(out / "attention.tokens.npy")
    assert tokens.shape[1] == doc["results"]["length"] and bos not in tokens  # rows hold text only


def test_a_model_continued_from_it_reads_the_bos_in_training_and_after(llama_with_bos, tmp_path, capsys):
    """Every training row gets the BOS too (the model saw it first in all its pretraining), the checkpoint
    records it, and the run, its export and plain transformers all read it first."""
    import transformers

    from contextlab.cli import main
    from contextlab.inference.checkpoint import read_checkpoint
    from contextlab.models.hf.causal import HFCausalLM
    from tests.conftest import shakespeare

    folder, bos = llama_with_bos
    hf = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    idx = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = hf(input_ids=torch.cat([torch.full((2, 1), bos), idx], dim=1)).logits[:, 1:]
        got = HFCausalLM(hf, [bos])(idx, return_hidden=True)
    torch.testing.assert_close(got.logits, want)
    assert got.hidden.shape[1] == 12 and all(t.shape[1] == 12 for t in got.layers)  # the BOS's cut
    plain = HFCausalLM(hf).flops_per_token(256)  # a row of 256 tokens runs 257 positions with the BOS
    assert HFCausalLM(hf, [bos]).flops_per_token(256) == pytest.approx(
        HFCausalLM(hf).flops_per_token(257) * 257 / 256
    )
    assert plain < HFCausalLM(hf, [bos]).flops_per_token(256) < plain * 1.01

    (tmp_path / "t.txt").write_text(shakespeare(20_000))
    tok = f"hf:{folder / 'tokenizer.json'}"
    assert (
        main(["data", "ingest", str(tmp_path / "t.txt"), "--tokenizer", tok, "--out", str(tmp_path / "s")])
        == 0
    )
    settings = ["data.store=" + str(tmp_path / "s"), "data.val_split=tail", "train.context=32"]
    settings += ["train.rows_per_step=2", "train.max_steps=1", "train.val_rows=2", "train.progress=false"]
    settings += ["train.out_dir=" + str(tmp_path / "run"), "train.dtype=fp32"]
    capsys.readouterr()
    assert main(["train", "--init-from", str(folder), *[a for s in settings for a in ("--set", s)]]) == 0
    assert "tokenizer puts <s> before every text: every training row gets it too" in capsys.readouterr().out
    record = read_checkpoint(tmp_path / "run").state["left_to_right"]
    assert record["prefix_ids"] == [bos] and record["tokenizer_lead"] == 1
    run = load_model(tmp_path / "run")
    assert run.info.lm_prefix == [bos]
    assert run.info.context == 32  # trained at 32: the best-context window and 'beyond' are about that
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "hf"), "--no-progress"]) == 0
    exported = load_model(tmp_path / "hf")
    assert exported.info.lm_prefix == [bos] and exported.info.objective == "clm"
    plain = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert plain("To be")["input_ids"][0] == bos  # the ecosystem reads it with the BOS, as it trained


def test_a_resumed_run_goes_on_as_it_began(llama_with_bos, tmp_path, capsys):
    """With the BOS when it began with it; without when it began before contextlab put it first (its
    checkpoints record none), so no run mixes the two."""
    from contextlab.cli import main
    from contextlab.inference.checkpoint import read_checkpoint
    from tests.conftest import shakespeare

    folder, bos = llama_with_bos
    (tmp_path / "t.txt").write_text(shakespeare(20_000))
    tok = f"hf:{folder / 'tokenizer.json'}"
    assert (
        main(["data", "ingest", str(tmp_path / "t.txt"), "--tokenizer", tok, "--out", str(tmp_path / "s")])
        == 0
    )

    def train(run, steps):
        settings = ["data.store=" + str(tmp_path / "s"), "data.val_split=tail", "train.context=32"]
        settings += [
            "train.rows_per_step=2",
            f"train.max_steps={steps}",
            "train.val_rows=2",
            "train.progress=false",
        ]
        settings += ["train.out_dir=" + str(run), "train.dtype=fp32", "train.ckpt_every=1"]
        assert main(["train", "--init-from", str(folder), *[a for s in settings for a in ("--set", s)]]) == 0
        return read_checkpoint(run).state["left_to_right"]

    assert train(tmp_path / "new", 1)["prefix_ids"] == [bos]
    assert train(tmp_path / "new", 2)["prefix_ids"] == [bos]  # resumed: still with it
    train(tmp_path / "old", 1)
    state_file = tmp_path / "old" / "checkpoints" / "step_000001" / "state.json"
    state = json.loads(state_file.read_text())
    state["left_to_right"] = {"prefix_ids": [], "why": ""}  # as a run begun before the BOS was put first
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    record = train(tmp_path / "old", 2)
    assert record == {"prefix_ids": [], "why": ""}
    assert "began without its tokenizer's BOS before every row; it goes on so" in capsys.readouterr().out

"""Write a contextlab tokenizer at an export's root as a ``PreTrainedTokenizerFast``.

``AutoTokenizer.from_pretrained(export)`` needs ``tokenizer.json`` + ``tokenizer_config.json``
at the folder's root, with the special tokens named. A saved contextlab tokenizer folder
(``tokenizer_spec.json`` + its files) becomes one:

- byte: a byte-level BPE without merges whose vocabulary lists the 256 byte symbols in byte
  order, so id i is byte i exactly as contextlab's ``ByteTokenizer`` encodes;
- gpt2 (``encoder.json`` + ``vocab.bpe``): the same BPE with the GPT-2 byte-level pre-tokenizer;
- hf (``tokenizer.json``): the file itself.

End-of-text is both eos and bos (contextlab separates documents with it and has no other),
the pad token is eos too (no id is added for it), and ``model_max_length`` is the model's
context. Tokens the run's objective appended to the data's vocabulary (FIM's
``<|fim_prefix|>``, ``<|fim_suffix|>``, ``<|fim_middle|>``) are added special tokens with the ids
the model trained with, so the tokenizer covers the model's whole vocabulary and infilling
prompts can be written outside contextlab. Trade-off: the byte and gpt2 tokenizers are
rebuilt from their files rather than shipped in contextlab's own format, so that any
``transformers`` reads them; the tests check that they give contextlab's ids.
"""

from __future__ import annotations

import json
from pathlib import Path

EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|end|>")


def _byte_symbols() -> list[str]:
    """GPT-2's printable symbol of each byte 0..255 (the byte-level alphabet), in byte order."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in shown else chr(next(extra)) for b in range(256)]


def _byte_level(vocab: dict[str, int], merges: list[tuple[str, str]], regex: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=regex)
    tok.decoder = decoders.ByteLevel()
    return tok


def backend_tokenizer(folder: Path, spec: dict, added: dict[str, int] | None = None):
    """The ``tokenizers.Tokenizer`` of a saved contextlab tokenizer folder, its special tokens and
    ``added`` (name -> id: tokens an objective appended, FIM's sentinels) added with their ids."""
    from tokenizers import AddedToken, Tokenizer

    kind = spec.get("kind")
    if (folder / "tokenizer.json").is_file() and kind != "byte":
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif kind == "byte":
        tok = _byte_level({s: i for i, s in enumerate(_byte_symbols())}, [], regex=False)
    elif (folder / "encoder.json").is_file():
        vocab = json.loads((folder / "encoder.json").read_text())
        lines = (folder / "vocab.bpe").read_text().splitlines()
        merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
        specials = set(spec.get("special_tokens") or {})
        tok = _byte_level({k: v for k, v in vocab.items() if k not in specials}, merges, regex=True)
    else:
        raise ValueError(f"{folder} holds no tokenizer files this export knows ({kind})")
    by_id = sorted((i, n) for n, i in {**(spec.get("special_tokens") or {}), **(added or {})}.items())
    for i, name in by_id:
        tok.add_special_tokens([AddedToken(name, special=True, normalized=False)])
        if tok.token_to_id(name) != i:
            raise ValueError(f"special token {name} would get id {tok.token_to_id(name)}, not {i}")
    return tok


def save_hf_tokenizer(
    tokenizer_dir: Path, out: Path, context: int, added: dict[str, int] | None = None
) -> dict[str, int]:
    """Write tokenizer.json + tokenizer_config.json of ``tokenizer_dir`` into ``out``, with the
    objective's ``added`` special tokens (name -> id) named; returns the special ids for config.json
    (bos/eos/pad_token_id)."""
    from transformers import PreTrainedTokenizerFast

    spec = json.loads((Path(tokenizer_dir) / "tokenizer_spec.json").read_text())
    specials = spec.get("special_tokens") or {}
    eos = next((n for n in EOS_NAMES if n in specials), None)
    if eos is None:
        raise ValueError(f"the tokenizer in {tokenizer_dir} has no end-of-text token ({sorted(specials)})")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend_tokenizer(Path(tokenizer_dir), spec, added),
        additional_special_tokens=list(added or {}),
        eos_token=eos,
        bos_token=eos,
        pad_token=eos,
        model_max_length=int(context),
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out)
    i = specials[eos]
    return {"bos_token_id": i, "eos_token_id": i, "pad_token_id": i}


def name_added_tokens(folder: Path, added: dict[str, int]) -> None:
    """Name ``added`` (name -> id: tokens an objective appended, FIM's sentinels) as special tokens in
    the Hugging Face tokenizer files of ``folder`` at the ids the model trained with: in tokenizer.json,
    and in tokenizer_config.json's ``added_tokens_decoder`` and ``additional_special_tokens`` where the
    file keeps those. ValueError when the tokenizer would give one of them another id."""
    from tokenizers import AddedToken, Tokenizer

    path = Path(folder) / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    for i, name in sorted((i, n) for n, i in added.items()):
        tok.add_special_tokens([AddedToken(name, special=True, normalized=False)])
        if tok.token_to_id(name) != i:
            raise ValueError(f"special token {name} would get id {tok.token_to_id(name)}, not {i}")
    tok.save(str(path))
    config = Path(folder) / "tokenizer_config.json"
    if not config.is_file():
        return
    cfg = json.loads(config.read_text(encoding="utf-8"))
    if isinstance(cfg.get("added_tokens_decoder"), dict):
        for name, i in added.items():
            cfg["added_tokens_decoder"][str(i)] = {
                "content": name,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
    if isinstance(cfg.get("additional_special_tokens"), list):
        known = cfg["additional_special_tokens"]
        cfg["additional_special_tokens"] = [*known, *(n for n in added if n not in known)]
    config.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

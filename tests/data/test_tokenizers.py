"""Tests for contextlab.data.tokenizers: exact ids, parity with tiktoken, hashes, save/load."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import tiktoken.load
from tiktoken_ext.openai_public import r50k_pat_str

from contextlab.corpus import books_dir
from contextlab.data import tokenizers as T
from contextlab.data.tokenizer_base import bytes_to_unicode
from contextlab.errors import UserError
from tests.conftest import GPT2_DIR, WIKI_TEST, read_gz_text, shakespeare

BOOKS = books_dir()  # the six public-domain books the package ships
UNICODE = "Naïve café — 🙂🚀 日本語 Ωμέγα\r\n\ttabs   spaces <|endoftext|> \x00\u200b𝔘"


def read(path: Path, n: int | None = None) -> str:
    return path.read_bytes().decode("utf-8")[:n]


def pg_text(name: str, n: int | None = None) -> str:
    """A shipped book with CRLF line ends, as Project Gutenberg serves its .txt files."""
    return read(BOOKS / name).replace("\n", "\r\n")[:n]


def random_unicode(rng: random.Random, n: int) -> str:
    """Random valid text: ASCII, Latin, CJK, emoji and astral code points (no surrogates)."""
    ranges = [(0x0, 0x7F), (0xA0, 0x24F), (0x4E00, 0x4FFF), (0x1F300, 0x1F64F), (0x10000, 0x10FFFF)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


@pytest.fixture(scope="module")
def gpt2() -> T.GPT2Tokenizer:
    tok = T.load_tokenizer(f"gpt2:{GPT2_DIR}")
    assert isinstance(tok, T.GPT2Tokenizer)
    return tok


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tiktoken.Encoding:
    """tiktoken's own GPT-2, built from the same files without contextlab (cache disabled)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", "")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        str(GPT2_DIR / "vocab.bpe"), str(GPT2_DIR / "encoder.json")
    )
    mp.undo()
    return tiktoken.Encoding(
        name="ref-gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}
    )


@pytest.fixture(scope="module")
def book_chunks() -> list[str]:
    text = pg_text("pg1597.txt", 300_000)
    return [text[i : i + 5000] for i in range(0, len(text), 5000)]


@pytest.fixture(scope="module")
def bpe(book_chunks) -> T.HFTokenizer:
    return T.train_bpe(book_chunks, 512)


@pytest.fixture(scope="module")
def all_kinds(gpt2, bpe) -> dict[str, T.Tokenizer]:
    return {"byte": T.ByteTokenizer(), "gpt2": gpt2, "bpe": bpe}


# ---------------------------------------------------------------- byte


def test_byte_exact_ids_and_specials():
    tok = T.load_tokenizer("byte")
    assert tok.encode("aé€") == [97, 195, 169, 226, 130, 172]
    assert tok.encode("é") == [195, 169]
    assert (tok.eot_id, tok.vocab_size, tok.special_tokens) == (256, 257, {"<|endoftext|>": 256})
    assert tok.encode("<|endoftext|>") == list(b"<|endoftext|>")  # never parsed as the special
    assert tok.decode(np.array([104, 105, 256, 195, 169])) == "hi<|endoftext|>é"
    with pytest.raises(ValueError, match="outside 0..256"):
        tok.decode([257])


def test_byte_round_trip_random_unicode():
    tok, rng = T.ByteTokenizer(), random.Random(0)
    texts = [random_unicode(rng, rng.randint(0, 300)) for _ in range(50)]
    for text, arr in zip(texts, tok.encode_batch(texts)):
        assert arr.dtype == np.uint32 and arr.tolist() == tok.encode(text) == list(text.encode("utf-8"))
        assert tok.decode(arr) == tok.decode(tok.encode(text)) == text


# ---------------------------------------------------------------- gpt2


def test_gpt2_known_ids(gpt2, reference):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert (gpt2.eot_id, gpt2.vocab_size, gpt2.special_tokens) == (50256, 50257, {"<|endoftext|>": 50256})
    plain = gpt2.encode("a<|endoftext|>b")
    assert plain == reference.encode_ordinary("a<|endoftext|>b") and 50256 not in plain
    assert gpt2.decode([15496, 50256, 995]) == "Hello<|endoftext|> world"


def test_gpt2_parity_with_tiktoken_on_real_text(gpt2, reference):
    texts = [pg_text(p.name, 200_000) for p in sorted(BOOKS.glob("*.txt"))[:3]]
    texts.append(read_gz_text(WIKI_TEST))
    texts += [read(Path(json.__file__).parent / n) for n in ("decoder.py", "encoder.py")]
    texts.append(read(Path(T.__file__)) + UNICODE)
    arrays = gpt2.encode_batch(texts)
    n_tokens = 0
    for text, arr in zip(texts, arrays):
        expected = reference.encode_ordinary(text)
        assert arr.dtype == np.uint32 and arr.tolist() == expected
        assert gpt2.decode(arr) == text
        n_tokens += len(expected)
    assert n_tokens > 400_000  # the comparison covered real volume


def test_gpt2_hf_file_form_gives_same_tokenizer(gpt2, tmp_path):
    vocab = json.loads(read(GPT2_DIR / "encoder.json"))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    shutil.copy(GPT2_DIR / "vocab.bpe", tmp_path / "merges.txt")
    hf_form = T.load_tokenizer(f"gpt2:{tmp_path}")
    assert hf_form.hash == gpt2.hash
    text = pg_text("pg158.txt", 50_000) + UNICODE
    assert hf_form.encode(text) == gpt2.encode(text)


def test_gpt2_save_writes_standard_files(gpt2, tmp_path):
    gpt2.save(tmp_path)
    for name in ("encoder.json", "vocab.bpe"):
        assert (tmp_path / name).read_bytes() == (GPT2_DIR / name).read_bytes()
    assert json.loads(read(tmp_path / T.SPEC_FILE)) == gpt2.spec()


# ---------------------------------------------------------------- hf and trained bpe


def test_hf_tokenizer_json_via_spec(bpe, tmp_path):
    (tmp_path / "tiny").mkdir()
    bpe._tok.save(str(tmp_path / "tiny" / "tokenizer.json"))
    by_file = T.load_tokenizer(f"hf:{tmp_path / 'tiny' / 'tokenizer.json'}")
    by_dir = T.load_tokenizer(f"hf:{tmp_path / 'tiny'}")
    assert by_file.kind == "hf" and by_file.name == by_dir.name == "tiny"
    assert by_file.hash == by_dir.hash == bpe.hash
    texts = ["Hello world", "", UNICODE, pg_text("pg158.txt", 20_000)]
    assert [a.tolist() for a in by_file.encode_batch(texts)] == [by_file.encode(t) for t in texts]


def test_hf_specials_post_processor_and_eos_choice():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["hello there, hello again"] * 10, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)]
    )
    hf = T.HFTokenizer(tok, "t")
    assert (hf.special_tokens, hf.eot_id) == ({"<s>": 0, "</s>": 1}, 1)
    ids = hf.encode("hello </s>")  # no template tokens, and "</s>" in text stays plain text
    assert 0 not in ids and 1 not in ids and hf.decode(ids) == "hello </s>"
    assert hf.encode_batch(["hello </s>"])[0].tolist() == ids


def test_bpe_trains_and_round_trips(bpe):
    assert (bpe.kind, bpe.name, bpe.vocab_size, bpe.eot_id) == ("hf", "bpe-512", 512, 0)
    held_out = pg_text("pg158.txt", 30_000) + UNICODE
    ids = bpe.encode(held_out)
    assert len(ids) < 0.6 * len(held_out.encode("utf-8"))  # merges were learned
    assert max(ids) < 512 and 0 not in ids
    assert bpe.decode(ids) == held_out
    rng = random.Random(1)
    for text in [random_unicode(rng, 200) for _ in range(20)]:
        assert bpe.decode(bpe.encode(text)) == text


def test_bpe_is_deterministic_across_processes(bpe):
    code = (
        "from pathlib import Path; from contextlab.data.tokenizers import train_bpe; "
        f"t = Path({str(BOOKS / 'pg1597.txt')!r}).read_bytes().decode('utf-8'); "
        "t = t.replace(chr(10), chr(13) + chr(10))[:300000]; "
        "print(train_bpe([t[i:i + 5000] for i in range(0, len(t), 5000)], 512).hash)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == bpe.hash


def test_bpe_spec_and_size_errors(book_chunks):
    tok = T.load_tokenizer("bpe:300", texts=lambda: book_chunks[:10])
    assert (tok.name, tok.vocab_size) == ("bpe-300", 300)
    assert tok.hash != T.train_bpe(book_chunks[:10], 301).hash
    with pytest.raises(UserError, match="at least 257"):
        T.train_bpe(book_chunks, 256)
    with pytest.raises(UserError, match="at least 259"):
        T.train_bpe(book_chunks, 258, special_tokens=("a", "b", "c"))
    with pytest.raises(UserError, match="needs training texts"):
        T.load_tokenizer("bpe:512")


# ---------------------------------------------------------------- tiktoken engine for byte-level BPE


@pytest.fixture(scope="module")
def bpe4k() -> T.HFTokenizer:
    """bpe:4096 trained on ~2 MB of whole books (the held-out texts below are not among them)."""
    return T.train_bpe([pg_text(p.name) for p in sorted(BOOKS.glob("*.txt"))[:5]], 4096)


def hf_engine(tok: T.HFTokenizer) -> T.HFTokenizer:
    return T.HFTokenizer(tok._tok, tok.name, engine="hf")


def tokenizer_json(tok: T.HFTokenizer) -> dict:
    return json.loads(tok._tok.to_str())


def from_json(obj: dict) -> T.HFTokenizer:
    from tokenizers import Tokenizer

    return T.HFTokenizer(Tokenizer.from_str(json.dumps(obj)), "edited")


def assert_same_ids(fast: T.Tokenizer, slow: T.Tokenizer, texts: list[str]) -> int:
    """Both engines give identical ids (batch and single) and decode back to the text.

    Returns the token count.
    """
    n = 0
    for text, a, b in zip(texts, fast.encode_batch(texts), slow.encode_batch(texts)):
        assert a.dtype == np.uint32 and a.tolist() == b.tolist()
        assert fast.decode(a) == text
        n += len(a)
    assert [fast.encode(t) for t in texts[:3]] == [slow.encode(t) for t in texts[:3]]
    return n


def test_trained_bpe_uses_tiktoken_and_keeps_its_identity(bpe4k, bpe):
    slow = hf_engine(bpe4k)
    assert (bpe4k.engine, bpe.engine, slow.engine) == ("tiktoken", "tiktoken", "hf")
    assert "3839 merges follow the token ids" in bpe4k.engine_reason and "asked" in slow.engine_reason
    assert bpe4k.hash == slow.hash and bpe4k.spec() == slow.spec()
    assert bpe4k.encode("a<|endoftext|>b") == slow.encode("a<|endoftext|>b") and bpe4k.eot_id == 0
    assert 0 not in bpe4k.encode("a<|endoftext|>b")  # the special's name stays plain text
    with pytest.raises(ValueError, match="engine must be"):
        T.HFTokenizer(bpe4k._tok, "x", engine="fast")


def test_tiktoken_engine_equals_hf_on_books_code_and_wiki(bpe4k):
    books = [pg_text("pg863.txt"), shakespeare()]  # the sixth shipped book and Tiny Shakespeare
    chunks = [books[0][i : i + 4000] for i in range(0, len(books[0]), 4000)]
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[::4][:50]
    code = [read(p) for p in stdlib]
    wiki = [read_gz_text(WIKI_TEST)]
    n = assert_same_ids(bpe4k, hf_engine(bpe4k), books + chunks + code + wiki)
    assert n > 1_000_000  # the comparison covered real volume


def test_tiktoken_engine_equals_hf_on_random_unicode(bpe4k):
    rng = random.Random(2)
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x85", "\u200b", "\ufeff"]
    pieces = ["'s", "'LL", " 123", "4567890", "😀", "👍🏽", "🇫🇷", "\u0301", " def", "<|endoftext|>"]
    texts = []
    for _ in range(300):
        parts = [random_unicode(rng, rng.randint(0, 40)) for _ in range(5)]
        parts += ["".join(rng.choices(spaces, k=rng.randint(1, 60))) for _ in range(5)]
        parts += rng.choices(pieces, k=5)
        rng.shuffle(parts)
        texts.append("".join(parts))
    texts += [UNICODE, " " * 5000, "\n" * 300 + "x", "\t \n" * 200, "", T.PROBE]
    assert_same_ids(bpe4k, hf_engine(bpe4k), texts)


def test_save_load_and_new_specials_keep_the_engine(bpe4k, tmp_path):
    bpe4k.save(tmp_path / "tok")
    back = T.load_tokenizer(f"dir:{tmp_path / 'tok'}")
    assert isinstance(back, T.HFTokenizer) and back.engine == "tiktoken" and back.spec() == bpe4k.spec()
    assert T.load_tokenizer(f"hf:{tmp_path / 'tok'}").hash == bpe4k.hash
    text = pg_text("pg158.txt", 20_000) + UNICODE
    assert back.encode(text) == bpe4k.encode(text)
    ext = bpe4k.with_special_tokens(["<|fim_prefix|>"])
    assert ext.engine == "tiktoken" and ext.encode("x<|fim_prefix|>") == bpe4k.encode("x<|fim_prefix|>")
    assert ext.decode([4096]) == "<|fim_prefix|>"
    assert hf_engine(bpe4k).with_special_tokens(["<|fim_prefix|>"]).engine == "hf"


def test_gpt2_as_tokenizer_json_uses_tiktoken(gpt2, tmp_path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(GPT2_DIR / "encoder.json"), str(GPT2_DIR / "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(T.EOT, special=True, normalized=False)])
    hf = T.HFTokenizer(tok, "gpt2-hf")
    assert hf.engine == "tiktoken" and "50000 merges" in hf.engine_reason
    text = pg_text("pg158.txt", 50_000) + UNICODE + read(Path(json.__file__).parent / "decoder.py")
    assert hf.encode(text) == gpt2.encode(text) == hf_engine(hf).encode(text)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda o: o.update(normalizer={"type": "Lowercase"}), "there is a normalizer"),
        (lambda o: o["pre_tokenizer"].update(add_prefix_space=True), "no prefix space"),
        (lambda o: o["pre_tokenizer"].update(use_regex=False), "GPT-2 regex"),
        (
            lambda o: o["model"].update(dropout=1e-9),
            "dropout",
        ),  # tiny: still a dropout, yet encode stays repeatable
        (lambda o: o.update(decoder={"type": "Fuse"}), "decoder is not ByteLevel"),
        (
            lambda o: o["added_tokens"].append(
                {**o["added_tokens"][0], "id": 4096, "content": "x", "special": False}
            ),
            "not special",
        ),
        (
            lambda o: o["model"].update(merges=o["model"]["merges"][1::-1] + o["model"]["merges"][2:]),
            "merge 1 'Ġ t' does not make a new token with an id above",
        ),
        (lambda o: o["model"]["merges"].reverse(), "merge 0 'Ġc ost': HF's own BPE does not turn"),
    ],
)
def test_hf_engine_kept_when_tiktoken_cannot_reproduce(bpe4k, edit, reason):
    obj = tokenizer_json(bpe4k)
    edit(obj)
    tok = from_json(obj)
    assert tok.engine == "hf" and reason in tok.engine_reason, tok.engine_reason
    text = "Hello World, don't  panic 123 🙂"
    assert tok.encode(text) == tok._tok.encode(text, add_special_tokens=False).ids
    assert tok.encode_batch([text])[0].tolist() == tok.encode(text)
    if reason == "there is a normalizer":
        assert tok.encode("HELLO") == tok.encode("hello") != bpe4k.encode("HELLO")


def test_equivalent_spellings_keep_tiktoken(bpe4k):
    obj = tokenizer_json(bpe4k)
    obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [obj["pre_tokenizer"]]}
    obj["normalizer"] = {"type": "Sequence", "normalizers": []}
    obj["model"]["ignore_merges"] = True  # HF then looks whole pieces up first, as tiktoken does
    tok = from_json(obj)
    assert tok.engine == "tiktoken" and tok.hash != bpe4k.hash  # another file, same ids
    texts = [T.PROBE + UNICODE, pg_text("pg158.txt", 50_000), read(Path(T.__file__))]
    assert_same_ids(tok, hf_engine(tok), texts)
    assert [tok.encode(t) for t in texts] == [bpe4k.encode(t) for t in texts]


def test_wordpiece_keeps_hf_engine():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "wor": 3, "##ld": 4, "!": 5}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp = T.HFTokenizer(tok, "wp")
    assert (wp.engine, wp.engine_reason) == ("hf", "the model is not BPE")
    assert wp.encode("hello world!") == [1, 2, 5] and wp.encode_batch(["hello zzz"])[0].tolist() == [1, 0]


def test_increasing_merge_ids_alone_do_not_make_tiktoken_exact():
    """Merges b+c, a+b, c+d, ab+cd have increasing ids, yet HF BPEs "abcd" as a|bc|d, tiktoken as abcd."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: b for b, c in bytes_to_unicode().items()} | {"bc": 256, "ab": 257, "cd": 258, "abcd": 259}
    tok = Tokenizer(models.BPE(vocab, [("b", "c"), ("a", "b"), ("c", "d"), ("ab", "cd")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(T.EOT, special=True, normalized=False)])
    hf = T.HFTokenizer(tok, "tricky")
    assert hf.engine == "hf" and "merge 3 'ab cd'" in hf.engine_reason, hf.engine_reason
    assert hf.encode("abcd") == [vocab["a"], 256, vocab["d"]]
    ranks = {bytes([b]): b for b in range(256)} | {b"bc": 256, b"ab": 257, b"cd": 258, b"abcd": 259}
    naive = tiktoken.Encoding(
        "naive", pat_str=T.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={T.EOT: 260}
    )
    assert naive.encode_ordinary("abcd") == [259]  # what a fast path without the check would return


# ---------------------------------------------------------------- hashes, save/load, specials


@pytest.mark.parametrize("kind", ["byte", "gpt2", "bpe"])
def test_save_load_round_trip(all_kinds, kind, tmp_path):
    tok = all_kinds[kind]
    tok.save(tmp_path / "tokenizer")
    back = T.load_tokenizer(f"dir:{tmp_path / 'tokenizer'}")
    assert type(back) is type(tok) and back.spec() == tok.spec()
    text = pg_text("pg158.txt", 20_000) + UNICODE
    assert back.encode(text) == tok.encode(text)


def test_hashes_differ_between_tokenizers(all_kinds, book_chunks):
    hashes = [t.hash for t in all_kinds.values()]
    hashes.append(T.train_bpe(book_chunks, 600).hash)
    hashes += [t.with_special_tokens(["<|fim_middle|>"]).hash for t in all_kinds.values()]
    assert len(set(hashes)) == len(hashes) and all(len(h) == 64 for h in hashes)


@pytest.mark.parametrize("kind", ["byte", "gpt2", "bpe"])
def test_with_special_tokens(all_kinds, kind, tmp_path):
    tok = all_kinds[kind]
    names = ["<|fim_prefix|>", "<|endoftext|>", "<|fim_suffix|>"]
    ext = tok.with_special_tokens(names)
    n = tok.vocab_size
    assert ext.special_tokens == {**tok.special_tokens, "<|fim_prefix|>": n, "<|fim_suffix|>": n + 1}
    assert ext.vocab_size == n + 2 and ext.eot_id == tok.eot_id and ext.hash != tok.hash
    assert ext.encode("x<|fim_prefix|>") == tok.encode("x<|fim_prefix|>")  # still plain text
    assert ext.decode([n, n + 1]) == "<|fim_prefix|><|fim_suffix|>"
    ext.save(tmp_path)
    back = T.load_saved_tokenizer(tmp_path)
    assert back.spec() == ext.spec()
    assert back.with_special_tokens(names[:2]).hash == ext.hash  # nothing new to add


def test_tampered_files_are_refused(all_kinds, tmp_path):
    for kind, tok in all_kinds.items():
        tok.save(tmp_path / kind)
    spec = json.loads(read(tmp_path / "byte" / T.SPEC_FILE))
    spec["special_tokens"]["<|pad|>"] = 257
    (tmp_path / "byte" / T.SPEC_FILE).write_text(json.dumps(spec))
    enc = tmp_path / "gpt2" / "encoder.json"
    enc.write_text(read(enc).replace('"<|endoftext|>"', '"<|end|>"'))
    tj = tmp_path / "bpe" / "tokenizer.json"
    obj = json.loads(read(tj))
    obj["model"]["merges"][:2] = obj["model"]["merges"][1::-1]  # swap the first two merges
    tj.write_text(json.dumps(obj))
    for kind in all_kinds:
        with pytest.raises(UserError, match="do not match their spec"):
            T.load_saved_tokenizer(tmp_path / kind)
    merges = tmp_path / "gpt2" / "vocab.bpe"
    lines = read(merges).split("\n")
    lines[1], lines[2] = lines[2], lines[1]
    merges.write_text("\n".join(lines))
    with pytest.raises(UserError, match="disagrees with the vocabulary ids"):
        T.load_saved_tokenizer(tmp_path / "gpt2")


def test_check_same_tokenizer(all_kinds):
    gpt2, byte = all_kinds["gpt2"].spec(), all_kinds["byte"].spec()
    T.check_same_tokenizer(gpt2, json.loads(json.dumps(gpt2)), "the model", "the data store")
    with pytest.raises(UserError) as err:
        T.check_same_tokenizer(gpt2, byte, "the model", "the data store")
    msg = str(err.value)
    assert msg.startswith(
        f"the model's tokenizer (gpt2, hash {gpt2['hash'][:8]}) differs from "
        f"the data store's (byte, hash {byte['hash'][:8]}): "
    )
    assert "\n" not in msg


# ---------------------------------------------------------------- bad specs


def test_bad_specs_name_the_problem(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    cases = {
        "sentencepiece:x": "unknown kind 'sentencepiece'",
        "gpt2": "gpt2 needs an argument",
        f"gpt2:{tmp_path / 'missing'}": "does not exist",
        f"gpt2:{tmp_path}": "neither encoder.json",
        "bpe:abc": "not a positive whole number",
        f"hf:{tmp_path / 'garbage.json'}": "cannot read",
        f"hf:{tmp_path}": "no tokenizer.json",
        f"dir:{tmp_path}": "cannot read",
    }
    for spec, problem in cases.items():
        with pytest.raises(UserError) as err:
            T.load_tokenizer(spec)
        msg = str(err.value)
        assert problem in msg and repr(spec) in msg and "use one of: byte | gpt2:DIR" in msg, msg


# ---------------------------------------------------------------- cutting long texts


def adversarial_texts(seed: int, n: int) -> list[str]:
    """Random mixes of letters, digits, punctuation, contractions and every kind of whitespace run."""
    rng = random.Random(seed)
    spaces = [
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u00a0",
        "\u3000",
        "\u2028",
        "\x0b",
        "\x85",
        "\x1c",
        "\u200b",
        "\u2009",
    ]
    pieces = ["'s", "'ll", " 123", "4567890", "😀", "👍🏽", "\u0301", " def", "don't", "...", "--", "日本"]
    texts = []
    for _ in range(n):
        parts = [random_unicode(rng, rng.randint(0, 20)) for _ in range(8)]
        parts += ["".join(rng.choices(spaces, k=rng.randint(1, 6))) for _ in range(12)]
        parts += rng.choices(pieces, k=12) + ["word"] * 10
        rng.shuffle(parts)
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("kind", ["byte", "gpt2", "bpe"])
def test_encoding_in_pieces_equals_encoding_whole(all_kinds, kind):
    tok = all_kinds[kind]
    book = pg_text("pg863.txt", 200_000)
    texts = [
        book,
        read(Path(sysconfig.get_paths()["stdlib"]) / "argparse.py"),
        UNICODE * 50,
        *adversarial_texts(3, 200),
    ]
    whole = tok.encode_batch(texts)
    for size in (7, 64, 1000):
        cuts = [tok.cut_points(t, size) for t in texts]
        assert sum(map(len, cuts)) > len(texts)  # the texts really were cut
        for text, c in zip(texts[:3], cuts):
            assert c == sorted(set(c)) and all(0 < i < len(text) for i in c)
        pieced = tok.encode_pieces(texts, size)
        assert [a.tolist() for a in pieced] == [b.tolist() for b in whole]


def test_gpt2_cuts_keep_every_regex_piece(gpt2):
    """The proof's premise, checked without any vocabulary.

    The regex pieces of the parts are those of the whole.
    """
    import regex

    pattern = regex.compile(T.GPT2_PATTERN)
    texts = [read(Path(sysconfig.get_paths()["stdlib"]) / "argparse.py"), *adversarial_texts(5, 300)]
    n_cuts = 0
    for text in texts:
        cuts = gpt2.cut_points(text, 16)
        n_cuts += len(cuts)
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        assert [p for part in parts for p in pattern.findall(part)] == pattern.findall(text)
    assert n_cuts > 1000


def test_gpt2_cuts_sit_after_a_non_space(gpt2):
    text = "a  b\t c\n d " + "x" * 50 + " end"
    cuts = gpt2.cut_points(text, 3)
    assert cuts and all(text[i] == " " and not text[i - 1].isspace() for i in cuts)
    assert gpt2.cut_points("  \n  " * 100, 10) == []  # only whitespace: nowhere safe to cut


def test_tokenizers_without_a_proof_never_cut(bpe4k):
    slow = hf_engine(bpe4k)
    text = pg_text("pg863.txt", 20_000)
    assert slow.cut_points(text, 100) == []
    assert slow.encode_pieces([text], 100)[0].tolist() == slow.encode(text)


# ---------------------------------------------------------------- identity


def test_tokenizer_resaved_by_transformers_keeps_its_identity(bpe, tmp_path):
    """transformers re-saves a tokenizer.json with other bytes (a no-op post-processor here); the
    ids are the same, so the hash is too, and a store made with one accepts the other."""
    from transformers import PreTrainedTokenizerFast

    from contextlab.data.ingest import IngestConfig, ingest
    from tests.conftest import write_tree

    bpe.save(tmp_path / "orig")
    fast = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "orig" / "tokenizer.json"))
    fast.save_pretrained(tmp_path / "resaved")
    raw = [(d / "tokenizer.json").read_bytes() for d in (tmp_path / "orig", tmp_path / "resaved")]
    assert json.loads(raw[0]) != json.loads(raw[1])  # the files differ
    resaved = T.load_tokenizer(f"hf:{tmp_path / 'resaved'}")
    text = pg_text("pg158.txt", 20_000) + UNICODE
    assert resaved.encode(text) == bpe.encode(text) and resaved.hash == bpe.hash
    corpus = write_tree(tmp_path / "c", {"a.txt": text})
    store = ingest(corpus, tmp_path / "s", IngestConfig(tokenizer=f"hf:{tmp_path / 'orig'}"), progress=False)
    store.store.check_tokenizer(resaved.spec(), "the model")


def test_what_changes_the_ids_changes_the_hash(bpe):
    """Merges, normalizer, pre-tokenizer, post-processor and added tokens are all part of the hash."""
    from tokenizers import AddedToken, normalizers, processors
    from tokenizers import Tokenizer as HFTok

    def variant(edit) -> str:
        tok = HFTok.from_str(bpe._tok.to_str())
        edit(tok)
        return T.HFTokenizer(tok, "x").hash

    def swap_merges(tok):
        obj = json.loads(tok.to_str())
        obj["model"]["merges"][:2] = obj["model"]["merges"][1::-1]
        tok.model = HFTok.from_str(json.dumps(obj)).model

    def post(tok):
        tok.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 256)]
        )

    hashes = {
        bpe.hash,
        variant(swap_merges),
        variant(lambda tok: setattr(tok, "normalizer", normalizers.NFKC())),
        variant(lambda tok: setattr(tok.pre_tokenizer, "add_prefix_space", True)),
        variant(post),
        variant(lambda tok: tok.add_tokens([AddedToken("hello", normalized=False)])),
    }
    assert len(hashes) == 6


def test_old_raw_file_hash_is_still_accepted(bpe, tmp_path):
    """Folders and stores written before the hash covered only what determines the ids hold the
    hash of the whole tokenizer.json: they still load, keep that hash, and match new specs."""
    bpe.save(tmp_path / "old")
    spec_file = tmp_path / "old" / T.SPEC_FILE
    spec = json.loads(spec_file.read_text())
    spec["hash"] = bpe.legacy_hash
    spec.pop("legacy_hash")
    spec_file.write_text(json.dumps(spec))
    assert bpe.legacy_hash != bpe.hash
    old = T.load_saved_tokenizer(tmp_path / "old")
    assert old.hash == bpe.legacy_hash  # the identity it was recorded with
    T.check_same_tokenizer(old.spec(), bpe.spec(), "the model", "the data store")
    T.check_same_tokenizer(spec, bpe.spec(), "the model", "the data store")


def test_a_tokenizer_json_saved_without_its_vocabulary_is_named_at_load(tmp_path):
    """A tokenizer.json whose BPE has no vocabulary encodes every text to no ids: each document would be
    dropped as shorter than one token; it is refused where it is read, naming the file and the fix."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(
        UserError, match=r"tokenizer\.json encodes text to no tokens \(its vocabulary holds 1 "
    ):
        T.load_tokenizer(f"hf:{tmp_path}")


@pytest.mark.parametrize("kind", ["byte", "gpt2", "bpe"])
def test_token_bytes_count_each_tokens_bytes_even_inside_a_character(kind, gpt2, bpe):
    """A piece of a document cut inside a character (ppl's --max-tokens) decodes its partial character
    to U+FFFD (3 bytes), so ppl's bits per byte of a byte model was not its bits per token; each
    token's own bytes are counted instead, and equal the decoded text's bytes wherever it is whole."""
    tok = {"byte": T.ByteTokenizer(), "gpt2": gpt2, "bpe": bpe}[kind]
    text = "naïve café — 数学 and more 😀 text " * 20
    ids = tok.encode(text)
    assert tok.token_bytes(ids) == len(text.encode("utf-8"))
    whole = [k for k in range(1, len(ids)) if "\ufffd" not in tok.decode(ids[:k])]
    cut = [k for k in range(1, len(ids)) if tok.decode(ids[:k]).endswith("\ufffd")]
    assert cut, "the text should have a cut inside a character"
    for k in whole[:50]:
        assert tok.token_bytes(ids[:k]) == len(tok.decode(ids[:k]).encode("utf-8"))
    k = cut[0]  # ids[:k] end inside a character: the bytes are those of the whole text up to it
    before = len(tok.decode(ids[: max(w for w in whole if w < k)]).encode("utf-8")) if whole[0] < k else 0
    assert before < tok.token_bytes(ids[:k]) < len(tok.decode(ids[:k]).encode("utf-8"))
    assert tok.token_bytes([tok.eot_id]) == len("<|endoftext|>")


def test_a_bpe_that_learns_fewer_tokens_than_asked_says_so(capsys):
    """`--tokenizer bpe:100000000` learned 13,108 tokens of a small corpus without a word."""
    tok = T.train_bpe(["a small corpus of few words " * 50], 5000)
    err = capsys.readouterr().err
    assert tok.vocab_size < 5000
    assert f"note: the BPE learned {tok.vocab_size:,} tokens, not the 5,000 asked" in err
    T.train_bpe(["a small corpus of few words " * 50], 260)
    assert "note" not in capsys.readouterr().err


def test_the_gpt2_bpe_as_gpt2_files_and_as_a_tokenizer_json_is_one_tokenizer(tmp_path):
    """A user's contextlab run (gpt2:DIR) and a Hugging Face model with GPT-2's tokenizer.json (the very
    file contextlab's export wrote) were refused as "different tokenizers" everywhere: the same ids."""
    from contextlab.data.gpt2_tokenizer import GPT2Tokenizer
    from contextlab.data.hf_tokenizer import HFTokenizer, train_bpe
    from contextlab.data.tokenizers import check_same_tokenizer, same_tokenizer
    from contextlab.models.hf.tokenizer import save_hf_tokenizer

    gpt2 = GPT2Tokenizer.from_dir(GPT2_DIR)
    gpt2.save(tmp_path / "g")
    save_hf_tokenizer(tmp_path / "g", tmp_path / "hf", context=64)
    hf = HFTokenizer.from_file(tmp_path / "hf" / "tokenizer.json")
    assert hf.hash != gpt2.hash and hf.ids_hash == gpt2.hash  # other files, the same ids
    assert same_tokenizer(gpt2.spec(), hf.spec()) and same_tokenizer(hf.spec(), gpt2.spec())
    check_same_tokenizer(hf.spec(), gpt2.spec(), "the model", "the data store")
    text = "  tabs\tand ünïcode 😀 <|endoftext|> the end"
    assert hf.encode(text) == gpt2.encode(text)
    # a BPE of other merges stays another tokenizer, and so does GPT-2's with another special token
    other = train_bpe([shakespeare(20_000)], 400)
    assert not same_tokenizer(other.spec(), gpt2.spec())
    more = hf._with_specials({"<|fim_prefix|>": gpt2.vocab_size})
    assert not same_tokenizer(more.spec(), gpt2.spec())
    with pytest.raises(UserError, match="differs from the data store's"):
        check_same_tokenizer(other.spec(), gpt2.spec(), "the model", "the data store")


def test_load_tokenizer_reads_a_stores_tokenizer_as_ingest_does(tmp_path):
    """`load_tokenizer("store:STORE")` was refused ("give its folder as dir:STORE/tokenizer") though
    `data ingest --tokenizer store:STORE` takes it."""
    from contextlab.data.ingest import IngestConfig, ingest

    src = tmp_path / "a.txt"
    src.write_text(shakespeare(5_000))
    store = ingest(src, tmp_path / "s", IngestConfig(tokenizer="bpe:300"), progress=False).store
    tok = T.load_tokenizer(f"store:{store.path}")
    assert tok.hash == store.tokenizer_hash and tok.encode("To be") == store.tokenizer().encode("To be")
    with pytest.raises(UserError, match="store"):
        T.load_tokenizer(f"store:{tmp_path / 'nowhere'}")

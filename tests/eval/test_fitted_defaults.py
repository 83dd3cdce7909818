"""Defaults fitted to the model's context, the one length warning naming the longest prompt and the
evaluation's own option, the settings line every evaluation prints, and ``--no-progress``."""

from __future__ import annotations

import warnings

import pytest

from contextlab.errors import UserError
from contextlab.eval import kv, needle, passkey, progress, scoring, tasks, vartrack
from contextlab.eval.adapter import ContextLengthWarning
from tests.conftest import KV_75
from tests.eval.conftest import byte_adapter, tiny_gpt

HAY = " ".join(f"Sentence number {i} says something about item {i * 7}." for i in range(400))


def fixed_positions(adapter):
    """The adapter as a model of absolute positions: any forward past its context is a UserError."""
    adapter.info.extends_beyond = False
    return adapter


@pytest.fixture
def haystack(tmp_path):
    (tmp_path / "hay.txt").write_text(HAY)
    return str(tmp_path)


def test_default_lengths_of_niah_passkey_vartrack_and_kv_fit_the_context(haystack):
    """The defaults are 1/4, 1/2 and 1 x the context less the answer's tokens (too-short ones left out),
    kv's pairs as many as fit; every prompt, control, candidate and generated token stays within the
    context, so a fixed-position model runs each evaluation with its defaults without an error."""
    adapter = fixed_positions(byte_adapter(tiny_gpt(1, context=1024), batch_size=8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        hay, _ = needle.build(adapter, needle.Options(samples=1, depths=[50.0]), haystack)
        keys, _ = passkey.build(adapter, passkey.Options(samples=1, depths=[50.0]), None)
        chains, _ = vartrack.build(adapter, vartrack.Options(samples=1), None)
        pairs, pair_info = kv.build(adapter, kv.Options(n_examples=2), str(KV_75))
    # niah: the longest value " take a ferry ... morning." is 62 bytes, generated with 4 more: 65 tokens
    assert sorted({s.cell[1] for s in hay}) == [1024 // 2 - 65, 1024 - 65]  # 1/4: too short for the question
    assert sorted({s.cell[1] for s in keys}) == [1024 // 2 - 8, 1024 - 8]  # a key: 6 tokens, 3 generated
    assert {s.cell[0] for s in chains} == {1024 - 27}  # 4 names of 6 tokens, 4 generated
    assert pair_info["n_pairs"] == 10 and pair_info["n_pairs_in_file"] == 75
    assert pair_info["positions"] == [0, 2, 4, 7, 9]
    for samples in (hay, keys, chains, pairs):
        assert tasks.longest_forward(samples, "both") <= 1024
    with pytest.raises(UserError, match=r"the longest kv prompt \(11 pairs\)"):  # one more does not fit
        kv.build(adapter, kv.Options(n_examples=2, n_pairs=11), str(KV_75))
    small = fixed_positions(byte_adapter(tiny_gpt(1, context=512), batch_size=8))
    out = passkey.run(small, passkey.Options(samples=1, depths=[50.0], scoring="both"), None)
    assert out.data["lengths"] == [512 - 8]  # ran, with generation, without leaving the context


def test_kv_with_a_context_too_short_for_one_candidate_set_is_one_line():
    adapter = byte_adapter(tiny_gpt(1, context=512))
    with pytest.raises(UserError) as err:
        kv.build(adapter, kv.Options(n_examples=1, distractors=4), str(KV_75))
    assert str(err.value) == (
        "kv: even 5 pairs (a candidate set of 1 + --distractors 4) make prompts of 603 tokens with the "
        "answer, more than the model's context of 512; lower --distractors (or leave it out: the default "
        "fits), or pass --n-pairs to run past the context (the model then extrapolates)"
    )


def test_kv_default_distractors_fit_a_small_context_and_say_so(capsys):
    """A user's 255-token model failed `eval kv` with the default --distractors 4 (5 pairs did not fit);
    left out, they are as many as fit (fewer pairs make the set), with a note on the settings line."""
    adapter = fixed_positions(byte_adapter(tiny_gpt(1, context=512), batch_size=8))
    samples, info = kv.build(adapter, kv.Options(n_examples=1), str(KV_75))
    assert (info["n_pairs"], info["distractors"]) == (3, 2)
    assert {len(s.candidates) for s in samples} == {3}
    assert tasks.longest_forward(samples, "both") <= 512
    kv.run(adapter, kv.Options(n_examples=1, scoring="likelihood"), str(KV_75))
    line = capsys.readouterr().out.splitlines()[0]  # the settings line
    assert line.endswith(
        "note 2 distractors, not 4: a set of 5 pairs with the answer is longer than the model's 512-token "
        "context (--distractors sets it)"
    )
    big = byte_adapter(tiny_gpt(1, context=1024))
    assert kv.build(big, kv.Options(n_examples=1), str(KV_75))[1]["distractors"] == 4  # 5 pairs fit
    small = byte_adapter(tiny_gpt(1, context=255))
    with pytest.raises(UserError) as err:
        kv.build(small, kv.Options(n_examples=1), str(KV_75))
    assert str(err.value) == (
        "kv: the model's context (255 tokens) is too short for key-value retrieval: even 2 pairs (the true "
        "one and 1 distractor, the fewest) make prompts of 360 tokens with the answer; pass --n-pairs 2 to "
        "run it past the context (the model then extrapolates)"
    )


def test_vartrack_default_hops_fit_a_small_context_and_say_so(capsys):
    """A user's 255-token model failed `eval vartrack` ("length 228 is too short for 8 statements"); left
    out, --hops is 3 or as many as fit, with a note; an explicit --hops keeps its one-line error."""
    adapter = fixed_positions(byte_adapter(tiny_gpt(1, context=450), batch_size=8))
    samples, info = vartrack.build(adapter, vartrack.Options(samples=2), None)
    assert (info["hops"], info["lengths"]) == (1, [450 - 15])  # 2 names of 6 tokens, 4 generated
    assert tasks.longest_forward(samples, "both") <= 450
    big = byte_adapter(tiny_gpt(1, context=1024))
    assert vartrack.build(big, vartrack.Options(samples=1, lengths=[600]), None)[1]["hops"] == 3
    vartrack.run(adapter, vartrack.Options(samples=1, scoring="likelihood"), None)
    assert capsys.readouterr().out.splitlines()[0] == (
        "vartrack: lengths 439 · chains 2 · hops 1 · texts per length 1 · prompts 2 · scoring likelihood · "
        "note 1 hop, not 3: a prompt that fits the model's 450-token context with its answer cannot hold the "
        "statements of 3 hops and the question (--hops sets it)"
    )
    with pytest.raises(UserError) as err:
        vartrack.build(adapter, vartrack.Options(samples=1, hops=3), None)
    assert str(err.value) == (
        "variable tracking length 423 is too short for 8 statements; use longer --lengths or fewer --hops "
        "(or leave --hops out: the default fits the length)"
    )
    with pytest.raises(UserError) as err:
        vartrack.build(adapter, vartrack.Options(samples=1, lengths=[200]), None)
    assert str(err.value) == (
        "variable tracking length 200 is too short for even 4 statements (2 chains of 1 hop: 389 tokens at "
        "least); use longer --lengths"
    )
    small = byte_adapter(tiny_gpt(1, context=255))
    with pytest.raises(UserError) as err:
        vartrack.build(small, vartrack.Options(samples=1), None)
    assert str(err.value) == (
        "vartrack: the model's context (255 tokens) is too short for variable tracking: even 2 chains of 1 "
        "hop (4 statements) need a prompt of 389 tokens at least, and 15 of its answer; pass --lengths 389 "
        "to run it past the context (the model then extrapolates)"
    )


def test_one_warning_names_the_longest_prompt_and_the_evaluations_option():
    """It named the first over-long prompt (520, not 1,024) and suggested a training key."""
    adapter = byte_adapter(tiny_gpt(2, context=512))
    o = passkey.Options(lengths=[600, 1024, 700], samples=1, depths=[50.0], scoring="likelihood")
    with pytest.warns(ContextLengthWarning) as record:
        samples, _ = passkey.build(adapter, o, None)
        scoring.score_samples(adapter, samples[:2], "likelihood")  # the forwards warn no more
    assert [str(w.message) for w in record] == [
        "the longest passkey prompt (1,024 tokens) with its answer runs tiny on 1,029 tokens, but it was "
        "trained at context 512 and its RoPE was not extended to "
        "1,029: positions past 512 are extrapolated and "
        "usually score much worse; use passkey --lengths of at most 507 to stay within the context (or "
        "leave --lengths out: the default lengths fit)"
    ]
    fixed = fixed_positions(byte_adapter(tiny_gpt(2, context=512)))
    with pytest.raises(UserError) as err:
        passkey.build(fixed, o, None)
    assert str(err.value) == (
        "the longest passkey prompt (1,024 tokens) with its answer runs tiny on 1,029 tokens but it "
        "supports at most 512; use passkey --lengths of at most 507 to stay within the context (or leave "
        "--lengths out: the default lengths fit)"
    )


def test_niah_and_kv_name_their_own_options_when_too_long(haystack):
    adapter = fixed_positions(byte_adapter(tiny_gpt(3, context=256)))
    with pytest.raises(UserError, match=r"no niah prompt fits the model's context of 256 tokens"):
        needle.build(adapter, needle.Options(lengths=[300], samples=1, depths=[0.0]), haystack)
    with pytest.raises(UserError, match=r"niah: the model's context \(256 tokens\) is too short"):
        needle.build(adapter, needle.Options(samples=1), haystack)  # no default fits: one line, no run
    big = fixed_positions(byte_adapter(tiny_gpt(3, context=1024)))
    with pytest.raises(UserError) as err:
        kv.build(big, kv.Options(n_examples=1, n_pairs=30, positions=[0]), str(KV_75))
    assert str(err.value).startswith("the longest kv prompt (30 pairs) runs tiny on ")
    assert str(err.value).endswith(
        "supports at most 1,024; use fewer pairs (--n-pairs), or leave --n-pairs out: the default number "
        "of pairs fits"
    )


def test_eval_niah_prints_its_settings_line_and_takes_no_progress(tmp_path, haystack, capsys, monkeypatch):
    import tqdm.auto

    from contextlab.cli import main
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.train.checkpoint import write_untrained_run

    made = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *a, **k):
            made.append(k.get("disable"))
            super().__init__(*a, **k)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    run = write_untrained_run(tmp_path / "run", tiny_gpt(4, context=512), ByteTokenizer(), note="test")
    args = ["eval", "niah", "--model", str(run), "--data", haystack, "--depths", "50", "--samples", "1"]
    args += ["--scoring", "likelihood", "--out", str(tmp_path / "out")]
    assert main([*args, "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "niah: lengths 451 · depths 50 · haystacks per cell 1 · needle values 5 · prompts 5 · "
        f"scoring likelihood · haystack {haystack}"
    )
    assert lines[1].startswith(f"niah {run}: ")
    assert made == [True] and not progress.enabled()  # the bar over the prompts, switched off
    made.clear()
    assert main(args) == 0
    assert made == [None] and progress.enabled()  # None: on a terminal only (tqdm's choice)


def test_eval_shows_the_length_warning_as_one_line(tmp_path, haystack, capsys):
    from contextlab.cli import main
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.train.checkpoint import write_untrained_run

    run = write_untrained_run(tmp_path / "run", tiny_gpt(5, context=256), ByteTokenizer(), note="test")
    args = ["eval", "niah", "--model", str(run), "--data", haystack, "--depths", "50", "--samples", "1"]
    args += ["--scoring", "likelihood", "--lengths", "300", "--out", str(tmp_path / "out"), "--no-progress"]
    with warnings.catch_warnings():
        warnings.simplefilter("always", ContextLengthWarning)  # as a user's first run: not yet shown
        assert main(args) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"contextlab eval: warning: the longest niah prompt (300 tokens) with its answer runs {run} on 361 "
        "tokens, but it was trained at context 256 and its RoPE was not extended to "
        "361: positions past 256 are "
        "extrapolated and usually score much worse; no niah prompt fits the model's context of 256 tokens "
        "(218 at least, and 61 of its answer), so every length measures extrapolation"
    ]


def test_kv_records_the_distractors_its_n_pairs_leave_room_for(capsys):
    """A user's `eval kv --n-pairs 2` scored sets of 2 keys (chance 1/2) and recorded 4 distractors: a
    prompt of n pairs holds a set of n keys at most, and the result and the settings line say so."""
    adapter = byte_adapter(tiny_gpt(1, context=2048), batch_size=8)
    samples, info = kv.build(adapter, kv.Options(n_examples=1, n_pairs=2), str(KV_75))
    assert {len(s.candidates) for s in samples} == {2}
    assert info["distractors"] == 1
    kv.run(adapter, kv.Options(n_examples=1, n_pairs=2, distractors=3, scoring="likelihood"), str(KV_75))
    line = capsys.readouterr().out.splitlines()[0]
    assert line.endswith(
        "note 1 distractor, not 3: a prompt of --n-pairs 2 holds a candidate set of 2 keys at most"
    )
    assert kv.build(adapter, kv.Options(n_examples=1, n_pairs=8), str(KV_75))[1]["distractors"] == 4

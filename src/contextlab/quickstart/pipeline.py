"""The quickstart as a list of steps: ingest, pack (EP, SPLICE), train (GPT, ContextLM), evaluate, report.

Each step calls the same Python API as its command (``ingest``, ``pack``, ``train``,
``evaluate``, ``build_report``) and leaves the same artifacts, so everything the
quickstart makes can be inspected and redone with the single commands it prints.

The steps run on ``contextlab.steps.StepRunner`` with one state file,
``OUT/quickstart_state.json``. Ingest and pack check themselves (a store records the
fingerprint it was made from; an identical one is "up to date", a killed one resumes).
Training runs, evaluations and the report are recorded with a fingerprint of everything
that determines them (the resolved run config and the packed store it reads; the
evaluation options and the run; every run and evaluation for the report). A recorded step
whose fingerprint still matches is skipped; a run killed half-way resumes from its newest
checkpoint; a finished step whose settings changed is refused with a one-line error
unless ``overwrite`` (then everything is redone from scratch). The state file of a
quickstart finished before the step runner existed has the same keys and fingerprints and
is read as it is.

Trade-off: every step runs in this one process (no subprocesses as in sweeps): the
quickstart is short and sequential, and one process gives one readable console with one
progress bar per step; a crash is resumed by running the same command again.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
import warnings
from pathlib import Path

from contextlab.errors import UserError
from contextlab.io import atomic_write_json
from contextlab.outputs import OutputKind, refuse_foreign
from contextlab.quickstart.config import EVALS, QuickstartConfig, eval_options, run_config, train_store
from contextlab.quickstart.summary import write_summary
from contextlab.steps import UP_TO_DATE, Step, StepRunner, digest

STATE_FILE = "quickstart_state.json"
# --overwrite deletes only the quickstart's own entries (runs, its state, report, summary), so
# anything else in the folder is kept and needs no check
QUICKSTART = OutputKind("a quickstart folder", lambda folder: (folder / STATE_FILE).is_file())
HELDOUT = "_heldout"  # OUT/<training store>_heldout: the held-out files the evaluations read


def _write(text: str) -> None:
    """Print without breaking a progress bar that is on screen."""
    from contextlab import bars

    bars.write(text)


class Quickstart:
    """The steps of one quickstart directory, grouped under the numbered headers they print."""

    def __init__(
        self, cfg: QuickstartConfig, out: str | Path, *, overwrite: bool = False, progress: bool = True
    ):
        self.cfg, self.out, self.overwrite, self.progress = cfg, Path(out), overwrite, progress
        if cfg.corpus.source:
            for line in fit_corpus(cfg.corpus):
                print(f"  note: {line}")
            check_corpus(cfg.corpus)  # before anything runs (or is removed by --overwrite)
        if overwrite and self.out.exists():
            refuse_foreign(self.out, QUICKSTART)
            for sub in ("runs", STATE_FILE, "report.html", "summary.json"):
                p = self.out / sub
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        self.runner = StepRunner(self.out / STATE_FILE, on_change=self._refuse, log=_write)
        self.stores: dict = {}  # store name -> TokenStore, filled by the ingest steps
        self.packed: dict = {}  # method -> PackedStore, filled by the pack steps
        self.train_name = train_store(cfg)  # OUT/stdlib, or OUT/corpus for a corpus of the user's
        self.heldout_name = self.train_name + HELDOUT

    @staticmethod
    def _refuse(step: Step) -> None:
        raise UserError(
            f"{step.outputs[0]} was made with other quickstart settings; pass --overwrite to redo the "
            f"quickstart, or --out NEW_DIR"
        )

    def plan(self, t0: float) -> list[tuple[str, list[Step]]]:
        """(header, steps) in the order they run; ``t0`` is when the invocation started."""
        c = self.cfg
        context = run_config(c, next(iter(c.runs)), self.out).train.context
        groups = [
            (what, [self.ingest_step(name, source, config)]) for name, what, source, config in self.jobs()
        ]
        for method in c.pack.methods:
            what = "files" if c.corpus.source else "code"
            title = f"pack the training {what} with {method} (context {context})"
            groups.append((title, [self.pack_step(method, context)]))
        for name, spec in c.runs.items():
            t = run_config(c, name, self.out).train
            title = (
                f"train {name}: {spec.objective} on the {spec.packing} sequences, "
                f"{t.max_steps or '?'} steps of {t.tokens_per_step:,} tokens"
            )
            groups.append((title, [self.train_step(name)]))
        evals = [self.eval_step(run, name) for run in c.runs for name in EVALS]
        groups.append((f"evaluate: {', '.join(EVALS)} for {', '.join(c.runs)}", evals))
        groups.append(("report", [self.report_step(t0)]))
        return groups

    def run(self) -> tuple[Path, dict]:
        """Run (or skip) every step; returns (report path, summary)."""
        from contextlab import bars

        t0 = time.perf_counter()
        groups = self.plan(t0)
        outcome = None
        for k, (title, steps) in enumerate(groups, 1):
            print(f"\n[{k}/{len(groups)}] {title}", flush=True)
            if len(steps) > 1:  # the evaluations: one bar over all of them
                steps = bars.bar(
                    steps,
                    desc="evaluate",
                    unit="eval",
                    disable=None if self.progress else True,
                    dynamic_ncols=True,
                )
            for step in steps:
                outcome = self.runner.run(step)
        page = self.out / "report.html"
        if outcome.ran:
            return page, outcome.value
        return page, json.loads((self.out / "summary.json").read_text())

    # ------------------------------------------------------------------ ingest and pack (self-checking)
    def jobs(self) -> list:
        """(store name, header, source, IngestConfig): the books (a BPE trained on them), the training
        code and the held-out code (same tokenizer); with ``corpus.source``, the corpus's training files
        (a BPE trained on them) and its held-out files (same tokenizer)."""
        from contextlab.corpus import STDLIB_EXCLUDE, books_dir, books_provenance, stdlib_dir
        from contextlab.data.ingest import IngestConfig
        from contextlab.data.sources import SourceOptions

        c, same = self.cfg.corpus, f"store:{self.out / 'books'}"
        if c.source:
            source, held = Path(c.source).expanduser(), ", ".join(c.heldout)
            train = SourceOptions(include=c.code_include, exclude=c.heldout + c.exclude, encoding="replace")
            return [
                (
                    self.train_name,
                    f"ingest {source} except {held}, with a {c.vocab}-token BPE trained on it",
                    source,
                    IngestConfig(tokenizer=f"bpe:{c.vocab}", source=train),
                ),
                (
                    self.heldout_name,
                    f"ingest the held-out files of {source} ({held}) for the evaluations, same tokenizer",
                    source,
                    IngestConfig(
                        tokenizer=f"store:{self.out / self.train_name}",
                        source=SourceOptions(include=c.heldout, exclude=c.exclude, encoding="replace"),
                    ),
                ),
            ]
        books = f"{len(books_provenance())} public-domain books with a {c.vocab}-token BPE trained on them"
        code = SourceOptions(include=c.code_include, exclude=STDLIB_EXCLUDE + c.heldout, encoding="replace")
        held = SourceOptions(include=c.heldout, exclude=STDLIB_EXCLUDE, encoding="replace")
        return [
            (
                "books",
                f"ingest {books}",
                books_dir(),
                IngestConfig(
                    tokenizer=f"bpe:{c.vocab}", source=SourceOptions(include=["*.txt"], strip_gutenberg="no")
                ),
            ),
            (
                self.train_name,
                f"ingest the Python standard library ({stdlib_dir()}) except {', '.join(c.heldout)}, "
                "with the same tokenizer",
                stdlib_dir(),
                IngestConfig(tokenizer=same, source=code),
            ),
            (
                self.heldout_name,
                f"ingest held-out code ({', '.join(c.heldout)}) for the evaluations",
                stdlib_dir(),
                IngestConfig(tokenizer=same, source=held),
            ),
        ]

    def ingest_step(self, name: str, source, config) -> Step:
        def run():
            from contextlab.data.ingest import ingest
            from contextlab.data.stats import plot_length_histogram

            t0 = time.perf_counter()
            if name == self.train_name and self.cfg.corpus.source:
                _say_notes(source, config.source)
            rep = ingest(
                source, self.out / name, config, overwrite=self.overwrite, progress=self.progress, notes=False
            )
            s = self.stores[name] = rep.store
            note = "up to date, skipped" if rep.up_to_date else f"{time.perf_counter() - t0:.1f} s"
            print(f"  {s.path}: {s.n_docs:,} documents, {s.n_tokens:,} tokens ({note})")
            bad = s.meta.get("source_stats", {}).get("undecodable_files", 0)
            if bad:  # replaced, as the recipe's corpus is read: said, never silent
                print(f"  {bad:,} file{'s' * (bad != 1)} held bytes that are not UTF-8, stored as U+FFFD")
            if not (s.path / "doc_lengths.png").exists() or not rep.up_to_date:
                plot_length_histogram(s, s.path / "doc_lengths.png")
            return UP_TO_DATE if rep.up_to_date else s

        return Step(f"ingest {name}", None, [self.out / name], run)

    def pack_step(self, method: str, context: int) -> Step:
        """Pack the training code with ``method``; write the packing's diagnostics beside it."""

        def run():
            from contextlab.data.packing import PackConfig, pack, pack_stats
            from contextlab.data.packing.stats import format_pack_stats, plot_pack_stats, stats_record

            p = self.cfg.pack
            cfg = PackConfig(  # every file packed: the evaluations read the held-out files
                method=method, context=context, retriever=p.retriever, k=p.k, seed=p.seed, val_fraction=0.0
            )
            dest = self.out / "packed" / method
            rep = pack(
                self.stores[self.train_name], dest, cfg, overwrite=self.overwrite, progress=self.progress
            )
            pk = self.packed[method] = rep.packed
            stats_file = pk.path / "pack_stats.json"
            if rep.up_to_date and stats_file.exists():
                print(f"  {pk.path}: {pk.n_sequences:,} sequences (up to date, skipped)")
                return UP_TO_DATE
            stats = pack_stats(pk)
            plot_pack_stats(stats, pk.path / "pack_stats.png")
            atomic_write_json(stats_file, stats_record(stats))
            print("  " + format_pack_stats(stats).replace("\n", "\n  "))
            return pk

        return Step(f"pack {method}", None, [self.out / "packed" / method], run)

    # ------------------------------------------------------------------ recorded steps
    def train_fingerprint(self, name: str) -> dict:
        """What determines run ``name``: its resolved config, the packed store it reads, its budget."""
        from contextlab.train.config import legacy_config_hash

        rc = run_config(self.cfg, name, self.out)
        t = rc.train
        return {  # the legacy hash: a quickstart finished before the non-default hash rule stays finished
            "config": legacy_config_hash(rc),
            "packed": self.packed[self.cfg.runs[name].packing].meta.get("fingerprint"),
            "budget": [t.max_steps, t.max_tokens, t.max_flops, t.max_minutes],
        }

    def train_step(self, name: str) -> Step:
        """Train run ``name`` of the recipe (a run killed half-way resumes from its newest checkpoint)."""
        rc = run_config(self.cfg, name, self.out)
        run_dir = Path(rc.train.out_dir)

        def run():
            from contextlab.train.trainer import train

            res = train(rc)
            if math.isfinite(res.final_loss):
                val = f", validation loss {res.val_loss:.4f}" if res.val_loss is not None else ""
                print(f"  {run_dir}: {res.steps} steps, train loss {res.final_loss:.4f}{val}")
            else:  # resumed from its last checkpoint: nothing was left to do
                print(f"  {run_dir}: {res.steps} steps, finished already")

        skip = f"  {run_dir}: finished already, skipped"
        return Step(
            f"train {name}", lambda: self.train_fingerprint(name), [run_dir / "config.toml"], run, skip
        )

    def eval_data(self, name: str) -> str:
        """What evaluation ``name`` reads: the held-out code, or the books (needle haystacks)."""
        from contextlab.corpus import books_dir

        return str(books_dir()) if name == "niah" else str(self.stores[self.heldout_name].path)

    def eval_step(self, run: str, name: str) -> Step:
        """Evaluation ``name`` (contextwise, bayes-fit, niah) of run ``run``."""
        e, run_dir, options = self.cfg.eval, self.out / "runs" / run, eval_options(self.cfg, name)

        def fingerprint() -> dict:
            held = self.stores[self.heldout_name].hash
            return {
                "run": digest(self.train_fingerprint(run)),
                "options": options,
                "dtype": e.dtype,
                "batch": e.batch_size,
                "data": self.eval_data(name) if name == "niah" else held,
            }

        def go():
            from contextlab.config import from_dict
            from contextlab.eval import EVALS as REGISTRY
            from contextlab.eval import evaluate, load_model
            from contextlab.eval.adapter import ContextLengthWarning

            adapter = load_model(run_dir, dtype=e.dtype, batch_size=e.batch_size)
            with (
                warnings.catch_warnings()
            ):  # scoring past the training context is deliberate here (see recipe)
                warnings.simplefilter("ignore", ContextLengthWarning)
                opts = from_dict(REGISTRY[name].options, options)
                _, res = evaluate(name, adapter, opts, self.eval_data(name), run_dir / "eval")
            summary = {
                k: round(v, 4) if isinstance(v, float) else v
                for k, v in res.results["summary"].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            _write(f"  {name} {run}: {json.dumps(summary)}")

        out_json = run_dir / "eval" / f"{name}.json"
        return Step(
            f"eval {run} {name}", fingerprint, [out_json], go, f"  {name} {run}: done already, skipped"
        )

    def report_step(self, t0: float) -> Step:
        """Summary numbers and plots, then the HTML report over everything in OUT."""
        page, summary_file = self.out / "report.html", self.out / "summary.json"

        def fingerprint() -> dict:  # every finished run and evaluation
            return {k: v for k, v in self.runner.state["steps"].items() if k != "report"}

        def run() -> dict:
            from contextlab.report.html import build_report

            seconds = {k: v for k, v in self.runner.seconds.items() if k != "report"}
            summary = write_summary(self.out, self.cfg, seconds, time.perf_counter() - t0)
            print(f"  wrote {build_report(self.out, title='contextlab quickstart')}")
            return summary

        return Step("report", fingerprint, [page, summary_file], run, f"  {page}: up to date, skipped")


def run_quickstart(
    cfg: QuickstartConfig, out: str | Path, *, overwrite: bool = False, progress: bool = True
) -> tuple[Path, dict]:
    """Run (or resume) the whole quickstart in ``out``; returns (report path, summary)."""
    return Quickstart(cfg, out, overwrite=overwrite, progress=progress).run()


HELD_EVERY = 10  # without a test/ folder, one file in this many (by name) is held out


def fit_corpus(c) -> list[str]:
    """Settings of ``corpus`` (``c``, changed in place) fitted to a folder of the user's that the
    recipe's defaults, made for the Python standard library, select nothing of: no ``.py`` file, so
    every file is read but its notes and records (README, SOURCE, .jsonl...; as ``profile`` reads a
    text folder); no ``test/`` folder, so one file in ``HELD_EVERY`` by name (at least one, and never
    all) is held out for the evaluations. A setting given (``--set``, a recipe) is kept as given.
    Returns the lines that say what was chosen."""
    from contextlab.data.source_globs import prose_excludes
    from contextlab.data.sources import SourceOptions, open_source
    from contextlab.errors import some
    from contextlab.quickstart.config import CorpusSection

    path, default, lines = Path(c.source).expanduser(), CorpusSection(), []
    if not path.is_dir():
        return lines  # check_corpus says so

    def files(include: list[str], exclude: list[str]) -> list[str]:
        options = SourceOptions(include=include, exclude=exclude)
        return [rel for rel, _ in open_source(path, options).files()[0]]

    if c.code_include == default.code_include and not files(c.code_include, c.exclude):
        c.code_include, c.exclude = ["**/*"], c.exclude or prose_excludes()
        lines.append(
            f"corpus.code_include: no {default.code_include[0]} file in {c.source}, so every file is read "
            f"but the corpus's notes and records (--set 'corpus.code_include=[\"GLOB\"]' chooses)"
        )
    if c.heldout == default.heldout and not files(c.heldout, c.exclude):
        every = files(c.code_include, c.exclude)
        chosen = every[HELD_EVERY - 1 :: HELD_EVERY] or every[-1:]
        if 0 < len(chosen) < len(every):
            c.heldout = ["/" + re.sub(r"([\[*?])", r"[\1]", rel) for rel in chosen]  # each file, anchored
            lines.append(
                f"corpus.heldout: no {default.heldout[0]} in {c.source}, so {len(chosen)} of its "
                f"{len(every)} files (one in {HELD_EVERY} by name) are held out for the evaluations: "
                f"{some(chosen, 3)} (--set 'corpus.heldout=[\"GLOB\"]' chooses)"
            )
    return lines


def check_corpus(c) -> None:
    """One line, before anything runs, for a ``corpus.source`` that cannot be split into training and
    held-out files: not a folder, or globs that select no file of it."""
    from contextlab.data.sources import SourceOptions, open_source

    path = Path(c.source).expanduser()
    if not path.is_dir():
        raise UserError(
            f"--corpus {c.source} is not a folder; the quickstart holds out some of a folder's files "
            "(corpus.heldout), so give the folder that holds them"
        )
    for what, include, exclude, key in (
        ("training", c.code_include, c.heldout + c.exclude, "corpus.code_include"),
        ("held-out", c.heldout, c.exclude, "corpus.heldout"),
    ):
        files = open_source(path, SourceOptions(include=include, exclude=exclude)).files()[0]
        if not files:
            raise UserError(
                f"{key} {include} selects no {what} file of {c.source}; name them with --set "
                f'\'{key}=["GLOB"]\' (globs on the path inside the corpus, e.g. "**/*.txt" or "test/**")'
            )


def _say_notes(source: Path, options) -> None:
    """The files of a corpus of the user's that look like its own notes (README, SOURCE, LICENSE...) and
    are trained on, with the recipe key that leaves them out (``data ingest`` says ``--exclude``)."""
    from contextlab.data.source_globs import exclude_globs, provenance_files
    from contextlab.data.sources import open_source
    from contextlab.errors import some

    found = provenance_files(rel for rel, _ in open_source(source, options).files()[0])
    if found:
        globs = ", ".join(f'"{g}"' for g in exclude_globs(found))
        print(
            f"  note: trained on as text though named like the corpus's own notes: {some(found, 5)}; "
            f"--set 'corpus.exclude=[{globs}]' leaves {'them' if len(found) > 1 else 'it'} out"
        )

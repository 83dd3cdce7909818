"""The quickstart pipeline: ingest -> pack (EP, SPLICE) -> train (GPT, ContextLM) -> evaluate -> report.

Each step calls the same Python API as its command (``ingest``, ``pack``, ``train``,
``evaluate``, ``build_report``) and leaves the same artifacts, so everything the
quickstart makes can be inspected and redone with the single commands it prints.

Resume and skip: ingest and pack keep their own fingerprints (an identical store is "up
to date"; a killed one resumes). Training runs, evaluations and the report are recorded in
``OUT/quickstart_state.json`` with a fingerprint of everything that determines them (the
resolved run config and the packed store it reads; the evaluation options and the run).
A recorded step whose fingerprint still matches is skipped; a run killed half-way resumes
from its newest checkpoint; a step whose settings changed is refused with a one-line
error unless ``overwrite`` (then everything is redone from scratch).

Trade-off: every step runs in this one process (no subprocesses as in sweeps): the
quickstart is short and sequential, and one process gives one readable console with one
progress bar per step; a crash is resumed by running the same command again.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
import warnings
from pathlib import Path

from contextlab.errors import UserError
from contextlab.io import atomic_write_json
from contextlab.quickstart.config import EVALS, TRAIN_STORE, QuickstartConfig, eval_options, run_config
from contextlab.quickstart.summary import write_summary

STATE_FILE = "quickstart_state.json"


def fingerprint(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Pipeline:
    """The steps of one quickstart directory, with the state that lets finished steps be skipped."""

    def __init__(
        self, cfg: QuickstartConfig, out: str | Path, *, overwrite: bool = False, progress: bool = True
    ):
        self.cfg, self.out, self.overwrite, self.progress = cfg, Path(out), overwrite, progress
        self.n_steps = 3 + len(cfg.pack.methods) + len(cfg.runs) + 2
        self.k = 0
        self.state_path = self.out / STATE_FILE
        if overwrite and self.out.exists():
            for sub in ("runs", STATE_FILE, "report.html", "summary.json"):
                p = self.out / sub
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        self.state = self._read_state()

    # ------------------------------------------------------------------ bookkeeping
    def _read_state(self) -> dict:
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            state = {}
        return {"steps": state.get("steps", {}), "seconds": state.get("seconds", {})}

    def _done(self, key: str, fp: str, output: Path) -> bool:
        """True when ``key`` finished with fingerprint ``fp``; refuses a finished step with other settings."""
        old = self.state["steps"].get(key)
        if old is None or not output.exists():
            return False
        if old == fp:
            return True
        raise UserError(
            f"{output} was made with other quickstart settings; pass --overwrite to redo the "
            f"quickstart, or --out NEW_DIR"
        )

    def _record(self, key: str, fp: str, seconds: float | None) -> None:
        self.state["steps"][key] = fp
        if seconds is not None:
            self.state["seconds"][key] = round(seconds, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.state_path, self.state)

    def header(self, text: str) -> None:
        self.k += 1
        print(f"\n[{self.k}/{self.n_steps}] {text}", flush=True)

    # ------------------------------------------------------------------ steps
    def ingest(self):
        """The books (a BPE trained on them), the training code and the held-out code (same tokenizer)."""
        from contextlab.corpus import STDLIB_EXCLUDE, books_dir, books_provenance, stdlib_dir
        from contextlab.data.ingest import IngestConfig, ingest
        from contextlab.data.sources import SourceOptions

        c = self.cfg.corpus
        jobs = [
            (
                "books",
                books_dir(),
                f"{len(books_provenance())} public-domain books with a {c.vocab}-token BPE trained on them",
                IngestConfig(
                    tokenizer=f"bpe:{c.vocab}", source=SourceOptions(include=["*.txt"], strip_gutenberg="no")
                ),
            ),
            (
                TRAIN_STORE,
                stdlib_dir(),
                f"the Python standard library ({stdlib_dir()}) except {', '.join(c.heldout)}, "
                "with the same tokenizer",
                IngestConfig(
                    tokenizer=f"store:{self.out / 'books'}",
                    source=SourceOptions(
                        include=c.code_include, exclude=STDLIB_EXCLUDE + c.heldout, encoding="replace"
                    ),
                ),
            ),
            (
                "stdlib_heldout",
                stdlib_dir(),
                f"held-out code ({', '.join(c.heldout)}) for the evaluations",
                IngestConfig(
                    tokenizer=f"store:{self.out / 'books'}",
                    source=SourceOptions(include=c.heldout, exclude=STDLIB_EXCLUDE, encoding="replace"),
                ),
            ),
        ]
        stores = {}
        for name, source, what, config in jobs:
            self.header(f"ingest {what}")
            t0 = time.perf_counter()
            rep = ingest(source, self.out / name, config, overwrite=self.overwrite, progress=self.progress)
            s = rep.store
            note = "up to date, skipped" if rep.up_to_date else f"{time.perf_counter() - t0:.1f} s"
            print(f"  {s.path}: {s.n_docs:,} documents, {s.n_tokens:,} tokens ({note})")
            if not rep.up_to_date:
                self.state["seconds"][f"ingest {name}"] = round(time.perf_counter() - t0, 1)
            if not (s.path / "doc_lengths.png").exists() or not rep.up_to_date:
                from contextlab.data.stats import plot_length_histogram

                plot_length_histogram(s, s.path / "doc_lengths.png")
            stores[name] = s
        return stores

    def pack(self, code_store) -> dict:
        """Pack the training code with every method; write each packing's diagnostics beside it."""
        from contextlab.data.packing import PackConfig, pack, pack_stats
        from contextlab.data.packing.stats import format_pack_stats, plot_pack_stats

        p, seq_len = self.cfg.pack, self.cfg_seq_len() + 1
        packed = {}
        for method in p.methods:
            self.header(f"pack the training code with {method} ({seq_len} tokens per sequence)")
            t0 = time.perf_counter()
            cfg = PackConfig(method=method, seq_len=seq_len, retriever=p.retriever, k=p.k, seed=p.seed)
            rep = pack(
                code_store,
                self.out / "packed" / method,
                cfg,
                overwrite=self.overwrite,
                progress=self.progress,
            )
            pk = rep.packed
            stats_file = pk.path / "pack_stats.json"
            if not rep.up_to_date or not stats_file.exists():
                stats = pack_stats(pk)
                plot_pack_stats(stats, pk.path / "pack_stats.png")
                atomic_write_json(
                    stats_file, {k: v for k, v in stats.items() if not k.endswith(("_all", "_per_sequence"))}
                )
                self.state["seconds"][f"pack {method}"] = round(time.perf_counter() - t0, 1)
                print("  " + format_pack_stats(stats).replace("\n", "\n  "))
            else:
                print(f"  {pk.path}: {pk.n_sequences:,} sequences (up to date, skipped)")
            packed[method] = pk
        return packed

    def cfg_seq_len(self) -> int:
        name = next(iter(self.cfg.runs))
        return run_config(self.cfg, name, self.out).train.seq_len

    def train(self, packed: dict) -> dict:
        """Train every run of the recipe (resuming a killed one); returns name -> fingerprint."""
        from contextlab.train.config import config_hash
        from contextlab.train.trainer import train

        fps = {}
        for name, spec in self.cfg.runs.items():
            rc = run_config(self.cfg, name, self.out)
            t = rc.train
            fp = fingerprint(
                {
                    "config": config_hash(rc),
                    "packed": packed[spec.packing].meta.get("fingerprint"),
                    "budget": [t.max_steps, t.max_tokens, t.max_flops, t.max_minutes],
                }
            )
            run_dir = Path(rc.train.out_dir)
            self.header(
                f"train {name}: {spec.objective} on the {spec.packing} sequences, "
                f"{rc.train.max_steps or '?'} steps of {rc.train.tokens_per_step:,} tokens"
            )
            if self._done(f"train {name}", fp, run_dir / "config.toml"):
                print(f"  {run_dir}: finished already, skipped")
            else:
                t0 = time.perf_counter()
                res = train(rc)
                if math.isfinite(res.final_loss):
                    print(
                        f"  {run_dir}: {res.steps} steps, train loss {res.final_loss:.4f}"
                        + (f", validation loss {res.val_loss:.4f}" if res.val_loss is not None else "")
                    )
                else:  # resumed from its last checkpoint: nothing was left to do
                    print(f"  {run_dir}: {res.steps} steps, finished already")
                self._record(f"train {name}", fp, time.perf_counter() - t0)
            fps[name] = fp
        return fps

    def evaluate(self, run_fps: dict, heldout_store) -> None:
        """contextwise loss on the held-out code and needle in a haystack, for every run."""
        from tqdm.auto import tqdm

        from contextlab.config import from_dict
        from contextlab.corpus import books_dir
        from contextlab.eval import EVALS as REGISTRY
        from contextlab.eval import evaluate, load_model
        from contextlab.eval.adapter import ContextLengthWarning

        e = self.cfg.eval
        data = {
            "contextwise": str(heldout_store.path),
            "bayes-fit": str(heldout_store.path),
            "niah": str(books_dir()),
        }
        jobs = [(run, name) for run in self.cfg.runs for name in EVALS]
        self.header(f"evaluate: {', '.join(EVALS)} for {', '.join(self.cfg.runs)}")
        bar = tqdm(jobs, desc="evaluate", unit="eval", disable=not self.progress, dynamic_ncols=True)
        for run, name in bar:
            run_dir = self.out / "runs" / run
            options = eval_options(self.cfg, name)
            fp = fingerprint(
                {
                    "run": run_fps[run],
                    "options": options,
                    "dtype": e.dtype,
                    "batch": e.batch_size,
                    "data": data[name] if name == "niah" else heldout_store.hash,
                }
            )
            out_json = run_dir / "eval" / f"{name}.json"
            if self._done(f"eval {run} {name}", fp, out_json):
                bar.write(f"  {name} {run}: done already, skipped")
                continue
            t0 = time.perf_counter()
            adapter = load_model(run_dir, dtype=e.dtype, batch_size=e.batch_size)
            with (
                warnings.catch_warnings()
            ):  # scoring past the training context is deliberate here (see recipe)
                warnings.simplefilter("ignore", ContextLengthWarning)
                _, res = evaluate(
                    name, adapter, from_dict(REGISTRY[name].options, options), data[name], run_dir / "eval"
                )
            summary = {
                k: round(v, 4) if isinstance(v, float) else v
                for k, v in res.results["summary"].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            bar.write(f"  {name} {run}: {json.dumps(summary)}")
            self._record(f"eval {run} {name}", fp, time.perf_counter() - t0)
        bar.close()

    def report(self, seconds: float) -> tuple[Path, dict]:
        """Summary numbers and plots, then the HTML report over everything in OUT."""
        from contextlab.report.html import build_report

        self.header("report")
        fp = fingerprint({k: v for k, v in self.state["steps"].items() if k != "report"})
        page = self.out / "report.html"
        summary_file = self.out / "summary.json"
        if self._done("report", fp, page) and summary_file.exists():
            print(f"  {page}: up to date, skipped")
            return page, json.loads(summary_file.read_text())
        summary = write_summary(self.out, self.cfg, self.state["seconds"], seconds)
        page = build_report(self.out, title="contextlab quickstart")
        self._record("report", fp, None)
        print(f"  wrote {page}")
        return page, summary


def run_quickstart(
    cfg: QuickstartConfig, out: str | Path, *, overwrite: bool = False, progress: bool = True
) -> tuple[Path, dict]:
    """Run (or resume) the whole quickstart in ``out``; returns (report path, summary)."""
    t0 = time.perf_counter()
    pipe = Pipeline(cfg, out, overwrite=overwrite, progress=progress)
    stores = pipe.ingest()
    packed = pipe.pack(stores[TRAIN_STORE])
    fps = pipe.train(packed)
    pipe.evaluate(fps, stores["stdlib_heldout"])
    return pipe.report(time.perf_counter() - t0)

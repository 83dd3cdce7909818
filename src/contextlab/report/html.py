"""``contextlab report DIR``: one self-contained HTML page for any folder of contextlab results.

The page is chosen by what DIR holds, read from result files only (never a model or the trainer,
so it can be built anywhere the files are, long after the runs):

* a profile folder (``profile.json`` of ``contextlab profile``): its headline, its steps, each
  model's evaluations and the comparisons (``report/profile.py``);
* anything else: the quickstart's summary.json, token and packed stores, sweep results, every
  training run (metrics, loss curve, evaluations, config), every other folder of evaluation
  results (a Hugging Face model folder's ``eval/``, an ``--out`` folder; ``report/evals.py``)
  with a table of the models side by side, every profile folder below it (as its own page shows
  it, a heading level down) and every other ``contextlab compare`` folder.

Plots are embedded as base64 PNGs, so the page is one file that can be mailed or archived. A
small script marks the page once it has loaded: every image decoded (``data-images-ok``) and
nothing wider than the window (``data-overflow``, with the details opened), which is how the
tests check in a real browser that every plot shows and every table fits. Trade-off: a table
wraps its cells (a long path or hash mid-word) rather than scroll sideways, so a reader sees
every column at once; only a table of more than 8 columns (a sweep's results) scrolls, in its
own box, never the page. Every page carries ``<meta name='generator' content='contextlab report'>``,
so ``is_report_page`` tells a page this module wrote (which a new one may replace) from any other file.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from contextlab import rundir
from contextlab.errors import UserError
from contextlab.io import atomic_write_text
from contextlab.report import profile
from contextlab.report.blocks import img, keys, muted, table
from contextlab.report.evals import (
    code_note,
    compare_sections,
    eval_folder_section,
    eval_folders,
    eval_key,
    folder_label,
    models_table,
    unlike_results,
)
from contextlab.report.runs import (
    OWN_LOSS_NOTE,
    data_sections,
    natural_key,
    outside_grid,
    run_section,
    stale_runs,
    summary_section,
)
from contextlab.report.together import together_section
from contextlab.sweep.results import rewritten_evals

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;
  padding:0 1em;color:#222}
h1,h2,h3,p,li,.key b{overflow-wrap:anywhere} h1{font-size:1.6em;margin-bottom:.2em}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em} h3{margin-bottom:.3em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f4f4f4} td.n{text-align:right} .w{overflow-wrap:anywhere}
table.kv th{font-weight:normal} table.kv td.n{text-align:left}
caption{text-align:left;font-weight:bold;padding:2px 0}
.records{display:flex;flex-wrap:wrap;gap:0 1.5em;align-items:flex-start} .records table{max-width:520px}
img{max-width:100%;border:1px solid #eee;margin:.4em 0}
pre{background:#f7f7f7;padding:.6em;font-size:.8em;white-space:pre-wrap;overflow-wrap:anywhere}
.muted{color:#777} .key{display:inline-block;margin:0 1.2em .4em 0}.key b{font-size:1.3em}
details{margin:.4em 0} .scroll{overflow-x:auto;max-width:100%}
"""
CHECK = """
<script>
window.addEventListener('load', function () {
  var all = function (sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); };
  var imgs = all('img');
  var ok = imgs.every(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-images-ok', ok ? 'yes' : 'no');
  var shut = all('details').filter(function (d) { return !d.open; });
  shut.forEach(function (d) { d.open = true; });
  var width = document.documentElement.clientWidth, wide = [];
  all('body *').forEach(function (e) {
    if (e.parentElement.closest('.scroll')) return;  // inside a box that scrolls: the box is checked
    var r = e.getBoundingClientRect();
    if (r.right > width + 1 || r.left < -1) {
      wide.push(e.tagName.toLowerCase() + ' ' + Math.round(r.width) + 'px');
    }
  });
  var page = document.documentElement.scrollWidth;
  if (page > width) wide.push('page ' + page + 'px');
  shut.forEach(function (d) { d.open = false; });
  document.body.setAttribute('data-overflow', wide.length ? wide.slice(0, 5).join('; ') : 'none');
});
</script>
"""


def build_report(
    directory: str | Path,
    out: str | Path | None = None,
    title: str | None = None,
    headline: dict | None = None,
) -> Path:
    """Write DIR/report.html (or ``out``) for any folder of results (see the module docstring)."""
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"report: {root} is not a directory; give a run, a model folder or a results folder")
    out = Path(out) if out else root / "report.html"
    check_out(directory, out)  # before anything is read: only a page of this module is replaced
    doc = profile.read_profile(root)
    if doc is not None:
        body, title = profile.profile_sections(root, doc), title or profile.title(doc)
    else:
        body = _folder_sections(root)
    if headline:
        body.insert(0, keys(headline))
    if not body:
        raise UserError(f"report: nothing to report in {root} ({_nothing_hint(root)})")
    title = title or f"contextlab report: {root.resolve().name}"
    atomic_write_text(out, _page(title, root, body))
    return out


def write_report(folder: str | Path, out: str | Path | None = None, title: str | None = None) -> Path:
    """The page of a folder a command has just written (a profile, an evaluation folder): its path."""
    return build_report(folder, out, title)


def _folder_sections(root: Path) -> list[str]:
    """Every kind of result found under ``root``, in reading order; the summary tables first."""
    body, tables, figures = [], [], []
    summary_file = root / "summary.json"
    if summary_file.exists() and json.loads(summary_file.read_text()).get("format") == "contextlab-summary":
        body.append(summary_section(root))
        figures = json.loads(summary_file.read_text()).get("figures") or []
    lead = len(body)  # the runs and models tables go right after the headline
    body += data_sections(root)
    runs = sorted(rundir.find_runs(root), key=natural_key)  # context-64 before context-128
    left_out = set(outside_grid(root))  # a sweep's runs of grid values its sweep file no longer has
    stale = stale_runs(root)  # a sweep's runs trained with another config than its sweep file's
    rewritten = rewritten_evals(root) if (root / "results.csv").is_file() else {}
    for run in runs[:50]:
        name = str(run.relative_to(root)) if run != root else run.name
        name += " (not in this sweep's grid)" if run in left_out else ""
        name += " (stale: trained with another config than the sweep file's)" if run.name in stale else ""
        name += " (evaluations rewritten since the sweep's table)" if run.name in rewritten else ""
        section, key = run_section(run, f"Run {name}")
        body.append(section)
        tables.append({"run": name, **key, **eval_key(run)})
    if len(runs) > 1:
        names = {r: t["run"] for r, t in zip(runs, tables)}
        together = together_section(runs[:50], names, contextwise="contextwise_models.png" not in figures)
        mixed = len({t.get("objective") for t in tables if t.get("objective")}) > 1
        said = muted(OWN_LOSS_NOTE) if mixed else ""
        said += "".join(muted(line) for line in unlike_results(runs[:50], names))
        body.insert(lead, "<h2>Runs</h2>" + table(tables) + said + ("\n" + together if together else ""))
    run_evals = {rundir.eval_dir(r).resolve() for r in runs}
    folders: dict[str, Path] = {}
    for f in eval_folders(root):  # llama/eval and a folder llama of its own would share a label
        label = folder_label(f, root)
        folders[label if label not in folders else str(f.relative_to(root))] = f
    own = rundir.eval_dir(root)  # a checkpoint's results are in its run's eval/, outside the checkpoint
    if rundir.is_checkpoint(root) and own.is_dir():
        folders[root.resolve().name] = own
    profiles = nested_profiles(root)  # each shown as its own page shows it, its folders not again
    inside = [p.resolve() for p in profiles]
    folders = {k: f for k, f in folders.items() if not _under(f, inside)}
    alone = {k: f for k, f in folders.items() if f.resolve() not in run_evals}
    for label, folder in alone.items():
        kind = "Model" if folder.name == rundir.EVAL and rundir.is_hf_folder(folder.parent) else "Results"
        body.append(eval_folder_section(folder, f"{kind} {label}"))
    if len(folders) > 1 and alone:
        together = root / "contextwise_models.png"  # `eval contextwise --model A --model B --out ROOT`
        drawn = img(together, "contextwise loss of the models") if together.is_file() and not figures else ""
        body.insert(lead + (len(runs) > 1), "<h2>Models</h2>" + models_table(folders) + drawn)
    note = code_note([rundir.eval_dir(r) for r in runs] + list(folders.values()))
    if note:
        body.insert(lead, f"<p><b>{html.escape(note)}</b></p>")
    for folder in profiles:
        doc = profile.read_profile(folder)
        name = html.escape(str(folder.relative_to(root)))
        body.append(f"<h2>Profile {name}: {html.escape(profile.title(doc))}</h2>")
        body += [_demoted(section) for section in profile.profile_sections(folder, doc)]
    return body + compare_sections(root, skip=inside)


def nested_profiles(root: Path) -> list[Path]:
    """The profile folders below ``root`` (not ``root`` itself; hidden folders skipped), sorted."""
    found = {f.parent for f in root.rglob(profile.FILE) if f.parent != root}
    return sorted(
        d
        for d in found
        if profile.read_profile(d) is not None
        and not any(part.startswith(".") for part in d.relative_to(root).parts)
    )


def _demoted(section: str) -> str:
    """A section one heading level down (h2 to h3, h3 to h4): a profile's part of a larger page."""
    for level in (4, 3, 2):
        section = section.replace(f"<h{level}>", f"<h{level + 1}>").replace(
            f"</h{level}>", f"</h{level + 1}>"
        )
    return section


def _under(folder: Path, tops: list[Path]) -> bool:
    here = folder.resolve()
    return any(here == t or t in here.parents for t in tops)


def _nothing_hint(root: Path) -> str:
    """What was looked for, and for a model folder without results, how to make some."""
    if rundir.is_hf_folder(root) or rundir.is_checkpoint(root):
        where = rundir.eval_dir(root)
        return f"no evaluation results in {where}: run `contextlab eval NAME --model {root}` first"
    return (
        "no runs, evaluation results, comparisons, token stores, sweep results or profile.json; "
        "give a run, a model folder with eval/, a folder of `contextlab eval --out` results "
        "or a profile folder"
    )


GENERATOR = "<meta name='generator' content='contextlab report'>"  # marks every page written here


def is_report_page(path: str | Path) -> bool:
    """Whether ``path`` is a page written by ``build_report``: its marker, or (pages from before the
    marker) the loading check every page ends with."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1000)
            if GENERATOR.encode() in head:
                return True
            fh.seek(max(0, Path(path).stat().st_size - len(CHECK) - 200))
            return head.startswith(b"<!doctype html>") and CHECK.encode() in fh.read()
    except OSError:
        return False


def check_out(directory: str, out: Path) -> None:
    """One line for an --out that is a folder, or a file that is not a page of this command."""
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give a file name such as {out / 'report.html'}")
    if not (out.exists() or out.is_symlink()) or is_report_page(out):
        return
    root = Path(directory).resolve()
    if out.resolve().is_relative_to(root):
        raise UserError(
            f"--out {out} is a file in {directory}, which the report reads, and not a report page; choose "
            "another --out (it is left as it is)"
        )
    raise UserError(
        f"--out {out} exists and is not a page of `contextlab report` (the only files it replaces); "
        "choose another --out (it is left as it is)"
    )


def _page(title: str, root: Path, body: list[str]) -> str:
    """The whole HTML page around the sections."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{GENERATOR}<title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p class='muted'>{html.escape(str(root.resolve()))}</p>"
        + "\n".join(body)
        + CHECK
        + "</body></html>"
    )

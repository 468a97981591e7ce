"""An offline attention page: one self-contained HTML file to explore where each head of a layer looks from each
token (its own hint says how to use it). Everything is inline (CSS, script, and the weights as JSON), and a
Content-Security-Policy forbids loading anything else, so the file opens from disk with no network.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cli import UserError
from files import clear_for_file, replace_file, write_error
from watch.heads import default_query, display_token, focused_head, head_name
from watch.headtypes import LABELS, MEANINGS, RULE, TYPES

DATA_ID = "attention-data"


@dataclass
class SentenceView:
    """One sentence on the page: its tokens, every layer's pattern [head, query_pos, key_pos],
    the token selected when the page opens, and the head to mark (layer, head) with why."""

    text: str
    tokens: list[str]
    patterns: list[torch.Tensor]
    query: int
    best: tuple[int, int]
    note: str


def sentence_view(text: str, tokens: Sequence[str], patterns: Sequence[torch.Tensor], *, query: int | None = None,
                  best: tuple[int, int] | None = None, note: str | None = None) -> SentenceView:
    """A sentence for the page. The query defaults to the last pronoun (else the last token); the
    marked head, to the most focused one from that query."""
    tokens = list(tokens)
    if not tokens or any(p.shape[-1] != len(tokens) for p in patterns):
        raise ValueError(f"patterns of shape {[tuple(p.shape) for p in patterns]} do not fit {len(tokens)} tokens")
    if query is None:
        query = default_query(tokens)
    if best is None:
        best = focused_head(patterns, query)
        note = note or f"most focused head from {display_token(tokens[query], space_mark='')!r}"
    return SentenceView(text, tokens, list(patterns), query, best, note or "best head")


def _float32_rows(pattern: torch.Tensor) -> list[list[list[float]]]:
    """[head][query_pos] -> the weights on keys 0..query_pos (the rest is the masked future),
    each the shortest decimal that reads back as the same float32."""
    values = pattern.detach().float().cpu().numpy()
    if not np.isfinite(values).all():  # weights that overflow give nan attention, which JSON cannot hold
        raise UserError("the model's attention weights are not finite numbers (nan or inf): its weights overflow; "
                        "use a checkpoint from before the run diverged")
    return [[[float(text) for text in values[head, q, :q + 1].astype(str)] for q in range(values.shape[1])]
            for head in range(values.shape[0])]


def attention_page(views: Sequence[SentenceView], title: str, labels: dict[str, str] | None = None,
                   reads: dict | None = None) -> str:
    """The page as one HTML string. It embeds as JSON each sentence's weights[layer][head][query_pos][key_pos <=
    query_pos], the heads' types by name (`labels`: "L1H3": "induction") and the heads each head reads from by
    composition (`reads`: `watch.composition.reads_from`), shown for a selected head."""
    if not views:
        raise ValueError("an attention page needs at least one sentence")
    sentences = [{"text": view.text, "tokens": [display_token(t, space_mark="") for t in view.tokens],
                  "query": view.query, "best": {"layer": view.best[0], "head": view.best[1],
                                                "name": head_name(*view.best), "note": view.note},
                  "weights": [_float32_rows(pattern) for pattern in view.patterns]} for view in views]
    data = {"title": title, "sentences": sentences, "types": dict(labels or {}), "reads": dict(reads or {})}
    data = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    # Inside <script>, "</script>" or "<!--" in a token must not end the block.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    values = {"title": html.escape(title), "data_id": DATA_ID, "data": data, "legend": html.escape(legend(labels))}
    return re.sub(r"\{(title|data_id|data|legend)\}", lambda match: values[match.group(1)], _TEMPLATE)


def legend(labels: dict[str, str] | None) -> str:
    """What the types beside the heads mean, and the rule that gives a head one, in a sentence or two."""
    shown = [kind for kind in TYPES if LABELS[kind] in set((labels or {}).values())]
    if not shown:
        return (f"No head has a type yet: {RULE}. python sample.py --heads prints every head's scores, and which "
                f"heads are close.")
    meanings = "; ".join(f"{LABELS[kind]}: {MEANINGS[kind]}" for kind in shown)
    return f"Types: {meanings}. {RULE[0].upper()}{RULE[1:]}."


def write_page(path: str | Path, page: str) -> Path:
    """Writes the page (parent folders made) as a new file renamed into place, so a link there is replaced,
    never written through; a path that cannot be written is a UserError."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        clear_for_file(path, "the attention page", "choose another path", follow_links=False)
        replace_file(path, lambda fh: fh.write(page.encode("utf-8")))
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists()), None)
        reason = f"{blocker} is a file, not a folder" if blocker and not blocker.is_dir() else write_error(exc, path)
        raise UserError(f"cannot write the attention page {path} ({reason}); choose a writable path") from None
    return path


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5em 2em; color: #222; background: #fff; }
  h1 { font-size: 1.25em; margin: 0 0 .2em; }
  .hint { color: #666; margin: 0 0 1em; }
  .controls { display: flex; gap: 1.2em; flex-wrap: wrap; margin-bottom: 1em; }
  .controls label { font-weight: 600; }
  select { font: inherit; margin-left: .3em; }
  table { border-collapse: separate; border-spacing: 3px; }
  #scroller { overflow-x: auto; max-width: 100%; }
  th.head, #tokens th:first-child { position: sticky; left: 0; z-index: 1; background: #fff; }
  th.head { text-align: right; font-weight: 600; padding-right: .5em; white-space: nowrap; }
  table.compact { border-spacing: 1px; }
  table.compact button.tok { font-size: .95em; padding: .2em 0; min-width: 1em; border-width: 1px;
                             border-radius: 3px; }
  table.compact td.cell { min-width: 1em; font-size: 0; }
  table.compact th.head .type { display: block; width: fit-content; margin-left: auto; }
  th.head.best { color: #b35900; }
  th.head .type { font-weight: 400; font-size: .8em; color: #555; background: #eef; border-radius: 3px;
                  padding: 0 .3em; }
  button.tok { font: inherit; font-size: 1.1em; padding: .25em .45em; border: 2px solid #ccc; border-radius: 6px;
               background: #f7f7f7; cursor: pointer; min-width: 2.2em; }
  button.tok:focus-visible { outline: 3px solid #3b82f6; outline-offset: 1px; }
  button.tok.query { border-color: #111; background: #111; color: #fff; }
  button.tok.future { opacity: .45; }
  td.cell { height: 1.9em; min-width: 2.2em; text-align: center; font-size: .8em; border-radius: 4px;
            background: #f3f3f3; font-variant-numeric: tabular-nums; }
  td.cell.future { background: repeating-linear-gradient(45deg, #fafafa, #fafafa 4px, #eee 4px, #eee 8px); }
  tr.dim { opacity: .4; }
  #readout { margin-top: 1em; font-family: ui-monospace, monospace; font-size: .9em; white-space: pre; }
  .swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px; margin-right: .3em; }
</style>
</head>
<body>
<h1>{title}</h1>
<p class="hint">Hover or click a token to see where each head of the layer looks from it; the stronger the colour,
the more attention (numbers on hover). &#9733; marks the best head; a head's type (induction, previous-token, ...)
stands beside its name. Arrow keys move between tokens.</p>
<p class="hint" id="legend">{legend}</p>
<div class="controls">
  <label id="sentence-label">sentence <select id="sentence"></select></label>
  <label>layer <select id="layer"></select></label>
  <label>head <select id="head"></select></label>
</div>
<div id="scroller"><table id="view" aria-describedby="readout"><thead><tr id="tokens"></tr></thead>
<tbody id="heads"></tbody></table></div>
<div id="readout" aria-live="polite"></div>
<p id="reads" class="hint"></p>
<script type="application/json" id="{data_id}">{data}</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("{data_id}").textContent);
const state = {sentence: 0, layer: 0, head: "all", query: 0, preview: null};
const COMPACT = 20;   // more tokens than this: the compact table
const $ = (id) => document.getElementById(id);

function item() { return data.sentences[state.sentence]; }
function headName(layer, head) { return "L" + layer + "H" + head; }
function isBest(layer, head) { const b = item().best; return b.layer === layer && b.head === head; }
function typeOf(layer, head) { return data.types[headName(layer, head)] || ""; }
function colour(head, nHead, alpha) {
  return "hsla(" + Math.round(head * 360 / nHead + 210) % 360 + ", 75%, 42%, " + alpha + ")";
}
function tip(h, q, k, w) {
  const it = item();
  return headName(state.layer, h) + ": " + JSON.stringify(it.tokens[q]) + " \\u2192 " + JSON.stringify(it.tokens[k]) +
         " " + w.toFixed(3);
}
function fmt(w) { return w >= 0.995 ? "1" : w.toFixed(2).replace(/^0/, ""); }

function options(select, entries, value) {
  select.replaceChildren(...entries.map(([v, text]) => {
    const o = document.createElement("option");
    o.value = String(v); o.textContent = text; return o;
  }));
  select.value = String(value);
}

function pickSentence(index) {
  state.sentence = index;
  const best = item().best;
  state.layer = best.layer; state.head = String(best.head); state.query = item().query; state.preview = null;
  build();
  render();
  keepInView();
}

// The selected token stays in view: the row scrolls (the head names stay put) until its column shows.
function keepInView() {
  const scroller = $("scroller"), button = $("tokens").querySelectorAll("button")[state.query];
  if (!button) return;
  const names = $("tokens").firstElementChild.getBoundingClientRect().width;
  const box = scroller.getBoundingClientRect(), cell = button.parentElement.getBoundingClientRect();
  if (cell.left < box.left + names) scroller.scrollLeft -= box.left + names - cell.left + 8;
  else if (cell.right > box.right) scroller.scrollLeft += cell.right - box.right + 8;
}

function build() {
  const it = item(), nLayer = it.weights.length;
  options($("layer"), [...Array(nLayer).keys()].map((l) => [l, "layer " + l + (l === it.best.layer ? " \\u2605" : "")]),
          state.layer);
  buildHeads();
  // Many tokens (a sentence of characters): narrow columns, the numbers on hover and in the readout only.
  $("view").classList.toggle("compact", it.tokens.length > COMPACT);
  const row = $("tokens");
  const corner = document.createElement("th");
  row.replaceChildren(corner, ...it.tokens.map((tok, i) => {
    const th = document.createElement("th");
    const b = document.createElement("button");
    b.className = "tok"; b.textContent = tok; b.dataset.pos = String(i);
    b.addEventListener("mouseenter", () => { state.preview = i; render(); });
    b.addEventListener("mouseleave", () => { state.preview = null; render(); });
    b.addEventListener("click", () => { state.query = i; state.preview = null; render(); keepInView(); });
    b.addEventListener("keydown", (e) => {
      const step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      const next = Math.min(Math.max(i + step, 0), it.tokens.length - 1);
      if (!step || next === i) return;
      e.preventDefault(); state.query = next; render(); row.querySelectorAll("button")[next].focus();
      keepInView();
    });
    th.appendChild(b); return th;
  }));
}

function buildHeads() {
  const it = item(), nHead = it.weights[state.layer].length;
  options($("head"), [["all", "all heads"], ...[...Array(nHead).keys()].map((h) =>
    [h, headName(state.layer, h) + (typeOf(state.layer, h) ? " " + typeOf(state.layer, h) : "") +
        (isBest(state.layer, h) ? " \\u2605 best" : "")])], state.head);
  if ($("head").value !== state.head) { state.head = "all"; $("head").value = "all"; }
  $("heads").replaceChildren(...[...Array(nHead).keys()].map((h) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.className = "head" + (isBest(state.layer, h) ? " best" : "");
    const sw = document.createElement("span");
    sw.className = "swatch"; sw.style.background = colour(h, nHead, 1);
    th.append(sw, headName(state.layer, h) + (isBest(state.layer, h) ? " \\u2605" : ""));
    if (typeOf(state.layer, h)) {
      const kind = document.createElement("span");
      kind.className = "type"; kind.textContent = typeOf(state.layer, h); th.append(" ", kind);
    }
    if (isBest(state.layer, h)) th.title = it.best.note;
    tr.appendChild(th);
    for (let k = 0; k < it.tokens.length; k++) {
      const td = document.createElement("td"); td.className = "cell"; tr.appendChild(td);
    }
    return tr;
  }));
}

function render() {
  const it = item(), q = state.preview === null ? state.query : state.preview;
  const heads = it.weights[state.layer], nHead = heads.length, one = state.head !== "all";
  $("tokens").querySelectorAll("button").forEach((b, k) => {
    b.classList.toggle("query", k === q);
    b.classList.toggle("future", k > q);
    b.setAttribute("aria-pressed", String(k === state.query));
    const w = one && k <= q ? heads[Number(state.head)][q][k] : null;
    b.style.background = w === null || k === q ? "" : colour(Number(state.head), nHead, w);
    b.style.color = w !== null && k !== q && w > 0.55 ? "#fff" : "";
    b.title = w === null ? "" : tip(Number(state.head), q, k, w);
  });
  const lines = [];
  $("heads").querySelectorAll("tr").forEach((tr, h) => {
    tr.classList.toggle("dim", one && Number(state.head) !== h);
    const row = heads[h][q];
    tr.querySelectorAll("td").forEach((td, k) => {
      const w = k <= q ? row[k] : null;
      td.classList.toggle("future", w === null);
      td.style.background = w === null ? "" : colour(h, nHead, w);
      td.style.color = w !== null && w > 0.55 ? "#fff" : "#222";
      td.textContent = w === null || w < 0.1 ? "" : fmt(w);
      td.title = w === null ? "" : tip(h, q, k, w);
    });
    const top = row.map((w, k) => [w, k]).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, 3);
    lines.push(headName(state.layer, h) + (isBest(state.layer, h) ? " \\u2605" : "  ") + "  " +
               top.map(([w, k]) => it.tokens[k].trim() + " " + fmt(w)).join(" | ") +
               (typeOf(state.layer, h) ? "   (" + typeOf(state.layer, h) + ")" : ""));
  });
  $("readout").textContent = "from " + JSON.stringify(it.tokens[q]) + " (token " + q + "), layer " + state.layer +
    ":\\n" + lines.join("\\n") + "\\n\\u2605 " + it.best.name + ": " + it.best.note;
  $("reads").textContent = one ? readsFrom(state.layer, Number(state.head)) : "";
}

function readsFrom(layer, head) {
  // The heads a head reads from: its three highest composition scores of each kind, the untrained model's in brackets.
  const name = headName(layer, head);
  const parts = ["K", "Q", "V"].filter((kind) => data.reads[kind] && data.reads[kind][name]).map((kind) =>
    kind + ": " + data.reads[kind][name].slice(0, 3).map(([source, value, was]) =>
      source + " " + value.toFixed(2) + (was === null ? "" : " (" + was.toFixed(2) + ")")).join(", "));
  if (!parts.length) return layer === 0 && data.reads.K ? name + " is in layer 0: it reads only the embeddings" : "";
  return name + " reads from (composition of the weights; untrained in brackets) " + parts.join(" \\u00b7 ");
}

$("sentence-label").hidden = data.sentences.length < 2;
options($("sentence"), data.sentences.map((s, i) => [i, s.text]), 0);
$("sentence").addEventListener("change", (e) => pickSentence(Number(e.target.value)));
$("layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); buildHeads(); render(); });
$("head").addEventListener("change", (e) => { state.head = e.target.value; render(); });
pickSentence(0);
</script>
</body>
</html>
"""

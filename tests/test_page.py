"""watch/show/page.py: the offline attention page, its embedded weights, and the page in a real browser."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import tiny_model

from common.errors import UserError
from data.tokenizer import CharTokenizer
from tests.chromium import Browser, find_chromium
from tests.commands import run_sample, run_train, tiny_args
from watch.measure.capture import capture_attention
from watch.measure.heads import focused_head
from watch.show.page import DATA_ID, PAGE, SentenceView, attention_page, write_page

TEXTS = ["the dog saw a cat. it ran.", 'a <cat> & "dog" </script>']


def demo_views():
    torch.manual_seed(3)
    tokenizer = CharTokenizer.from_text("".join(TEXTS))
    model = tiny_model(vocab_size=tokenizer.vocab_size, block_size=32, n_head=3, n_embd=12, seed=None).train()
    for p in model.parameters():  # sharper patterns than at initialisation, so heads differ
        torch.nn.init.normal_(p, std=0.5)
    views, captured = [], []
    for text in TEXTS:
        ids = tokenizer.encode(text)
        patterns = capture_attention(model, [ids])[0]
        captured.append(patterns)
        views.append(SentenceView(text, tokenizer.token_strings(ids), patterns))
    return views, captured


def embedded(page: str) -> dict:
    """The JSON the page carries, parsed back out of its <script> block."""
    match = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, re.DOTALL)
    assert match is not None
    return json.loads(match.group(1))


def test_the_weights_in_the_page_are_the_captured_ones():
    views, captured = demo_views()
    data = embedded(attention_page(views, "demo"))
    assert [s["text"] for s in data["sentences"]] == TEXTS
    for sentence, patterns in zip(data["sentences"], captured, strict=True):
        assert len(sentence["weights"]) == len(patterns) == 2
        for layer, pattern in zip(sentence["weights"], patterns, strict=True):
            n = pattern.shape[-1]
            assert [[len(row) for row in head] for head in layer] == [list(range(1, n + 1))] * 3  # causal rows
            # Read back as float32, every weight is exactly the one captured.
            full = torch.zeros_like(pattern)
            for h, head in enumerate(layer):
                for q, row in enumerate(head):
                    full[h, q, : q + 1] = torch.tensor(row, dtype=torch.float32)
            assert torch.equal(full, pattern)


def test_the_page_marks_the_pronoun_and_a_head_and_loads_nothing_from_outside():
    views, captured = demo_views()
    page = attention_page(views, "a <b> & c")
    data = embedded(page)
    first = data["sentences"][0]
    assert first["query"] == len(TEXTS[0]) - 1  # characters are never pronouns: the last token
    layer, head = focused_head(captured[0], first["query"])
    assert (first["best"]["layer"], first["best"]["head"], first["best"]["name"]) == (layer, head, f"L{layer}H{head}")
    assert first["best"]["note"] == "most focused head from '.'"
    words = ["The", " dog", " saw", " it", " and", " ran"]
    pronoun = SentenceView("The dog saw it and ran", words, [p[:, :6, :6] for p in captured[0]])
    assert pronoun.query == 3 and pronoun.best == focused_head([p[:, :6, :6] for p in captured[0]], 3)
    assert "</script>" not in page.split(f'id="{DATA_ID}">')[1].split("</script>")[0]
    assert "<title>a &lt;b&gt; &amp; c</title>" in page
    # Self-contained: no reference to anything on a network, and a policy that forbids loading any.
    assert re.findall(r"https?:|//[a-z0-9.-]+\.[a-z]{2,}/|\b(?:src|href)=|@import|url\(", page, re.IGNORECASE) == []
    assert "default-src 'none'" in page


def test_a_chosen_head_and_query_are_kept_and_a_bad_path_is_one_clear_error(tmp_path):
    views, captured = demo_views()
    view = SentenceView(TEXTS[0], views[0].tokens, captured[0], query=3, best=(1, 2), note="best on probes")
    assert (view.query, view.best, view.note) == (3, (1, 2), "best on probes")
    with pytest.raises(ValueError, match="do not fit"):
        SentenceView(TEXTS[0], views[0].tokens[:-1], captured[0])
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot write the attention page .*a-file/page.html"):
        write_page(blocker / "page.html", attention_page([view], "t"))
    assert write_page(tmp_path / "new" / "page.html", "<p>").read_bytes() == PAGE.header + b"<p>"  # its first line


def test_training_and_sample_write_the_page(tmp_path):
    text = "the dog and it"
    code, out, err = run_train(tiny_args(tmp_path, f"--watch_sentences={json.dumps([text])}"))
    assert code == 0, err
    written = tmp_path / "out" / "attention.html"
    assert f"attention page: {written}" in out.splitlines()[-2]  # after the TensorBoard command
    assert [s["text"] for s in embedded(written.read_text(encoding="utf-8"))["sentences"]] == [text]

    page = tmp_path / "pages" / "it.html"
    code, out, err = run_sample([f"--out_dir={tmp_path / 'out'}", "--attention", text, "--html", str(page)])
    assert code == 0, err
    assert f"attention page: {page}" in out and not (tmp_path / "out" / "attention").exists()  # no PNGs
    data = embedded(page.read_text(encoding="utf-8"))
    (sentence,) = data["sentences"]
    assert sentence["text"] == text and sentence["query"] == len(text) - 1
    code, out, _ = run_sample([f"--out_dir={tmp_path / 'out'}", "--attention", text, "--json"])
    patterns = json.loads(out)["patterns"]
    for layer, layer_json in zip(sentence["weights"], patterns, strict=True):
        for head, head_json in zip(layer, layer_json, strict=True):
            for q, row in enumerate(head):
                assert row == pytest.approx(head_json[q][: q + 1], abs=1e-6)


def test_the_page_works_in_headless_chromium(tmp_path):
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "no Chromium on PATH (chromium, chromium-browser, google-chrome) and $CHROMIUM unset; "
            "install it (apt-get install chromium) to test the attention page in a browser"
        )
    views, _ = demo_views()
    page = write_page(tmp_path / "page.html", attention_page(views, "demo"))
    shown = "document.getElementById('readout').textContent"
    cells = "[...document.querySelectorAll('td.cell')].map(td => td.style.background + td.textContent).join('|')"
    with Browser(binary, tmp_path / "profile") as browser:
        session = browser.open(page.as_uri())
        first_view, first_cells = browser.evaluate(session, shown), browser.evaluate(session, cells)
        assert first_view.startswith(f'from "." (token {views[0].query}), layer {views[0].best[0]}:')
        assert browser.evaluate(session, "document.getElementById('head').value") == str(views[0].best[1])

        browser.click(session, "button.tok[data-pos='4']")  # "d" of "dog"
        clicked_view = browser.evaluate(session, shown)
        assert clicked_view.startswith('from "d" (token 4)') and clicked_view != first_view
        assert browser.evaluate(session, cells) != first_cells
        pressed = "[...document.querySelectorAll('button.tok')].map(b => b.getAttribute('aria-pressed'))"
        assert browser.evaluate(session, pressed).index("true") == 4

        browser.press(session, "ArrowRight", 39)
        assert browser.evaluate(session, shown).startswith('from "o" (token 5)')
        browser.move_mouse(session, 1, 1)  # off the tokens, so none is hovered when the sentence changes
        browser.evaluate(
            session,
            "(s => { s.value = '1'; s.dispatchEvent(new Event('change')); })(document.getElementById('sentence'))",
        )
        assert browser.evaluate(session, shown).startswith(f"from {json.dumps(views[1].tokens[-1])} (token ")
        problems, requests = browser.problems(), browser.requests()
    assert problems == []
    assert requests and all(url.startswith("file:") for url in requests), requests


SENTENCE = "Then the king said to the girl, 'Take this ring, it is yours.'"  # 62 characters


def char_page(tmp_path, text: str, block_size: int):
    """The page of `text` on a character model of `block_size` (random weights, so heads differ)."""
    torch.manual_seed(5)
    tokenizer = CharTokenizer.from_text(text)
    model = tiny_model(vocab_size=tokenizer.vocab_size, block_size=block_size, n_head=4, n_embd=16, seed=None)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)
    ids = tokenizer.encode(text)
    view = SentenceView(text, tokenizer.token_strings(ids), capture_attention(model, [ids])[0])
    return write_page(
        tmp_path / "page.html", attention_page([view], "a sentence of characters", {"L0H1": "previous-token"})
    ), view


GEOMETRY = """(() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; };
  const scroller = document.getElementById('scroller');
  const selected = document.querySelector('button.tok.query');
  return {width: innerWidth, scroller: box(scroller), selected: box(selected.parentElement),
          names: [...document.querySelectorAll('th.head')].map(box),
          scrolls: scroller.scrollWidth > scroller.clientWidth};
})()"""


def test_a_sentence_of_a_block_of_characters_keeps_its_selected_token_and_head_rows_in_view(tmp_path):
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "no Chromium on PATH (chromium, chromium-browser, google-chrome) and $CHROMIUM unset; "
            "install it (apt-get install chromium) to test the attention page in a browser"
        )
    assert len(SENTENCE) >= 60
    long_text = " ".join([SENTENCE] * 3)  # 188 characters: wider than any window, so the row must scroll
    with Browser(binary, tmp_path / "profile") as browser:
        for text, block, scrolls in ((SENTENCE, 64, False), (long_text, 192, True)):
            page, view = char_page(tmp_path, text, block)
            session = browser.open(page.as_uri())
            browser.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            browser.evaluate(session, "pickSentence(0)")  # laid out again at the laptop's width
            shown = browser.evaluate(session, GEOMETRY)
            left, right = shown["scroller"]
            assert shown["scrolls"] == scrolls, shown
            # The selected token (the last, on characters) shows without scrolling by hand,
            names_right = max(r for _, r in shown["names"])
            assert names_right <= shown["selected"][0] and shown["selected"][1] <= min(right, shown["width"]), shown
            # and every head's row keeps its name in view.
            assert len(shown["names"]) == 4 and all(left <= a and b <= shown["width"] for a, b in shown["names"])
            assert view.query == len(text) - 1
            if not scrolls:
                shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
                assert len(shot) > 1000
        assert browser.problems() == []

"""How text we did not write (a prompt, a corpus's tokens, a sample, a file name) is shown: one rule for
a terminal and one for TensorBoard's Markdown, so that such text is only ever shown, never obeyed.

- `for_terminal`: every character a terminal would act on instead of showing (ESC, which starts the
  sequences that clear a screen or retitle a window, the other C0 and C1 controls, DEL, and the
  invisible format characters such as right-to-left overrides) is written as its escape, as Python
  writes it in a string literal: `\\x1b`, `\\n`, `\\u202e`. Printable text is left as it is.
- `markdown_literal`: text as an indented code block, which Markdown shows character for character:
  no fence inside the text can close it and no HTML or markup in it is read, however it is written.
"""

from __future__ import annotations

import re

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def for_terminal(text: str) -> str:
    """`text` with every character that is not printable (see `str.isprintable`; a space is) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


# The line breaks Python-Markdown (TensorBoard's) knows: it turns "\r\n" and "\r" into "\n" first.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def markdown_literal(text: str) -> str:
    """`text` as a Markdown code block indented by four spaces, every line of it. Unlike a fenced block,
    which a line of ``` in the text would close, an indented block ends only at a line that is not
    indented, and this one has none; a fence or an HTML tag inside it is neither (an indented line is
    never one), and Markdown shows the block's characters as they are."""
    return "\n".join("    " + line for line in _LINE_BREAK.split(text))

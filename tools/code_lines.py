"""How much production code there is, counted as the project counts it: the lines of every `.py` outside tests/,
bench/ and tools/ that hold code, once `ruff format` has laid them out; blank lines, comments and docstrings are not
counted, so explaining a decision costs nothing and packing code onto fewer lines gains nothing.

    ruff format --check . && python tools/code_lines.py [ROOT] [--files]
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

NOT_PRODUCTION = ("tests", "bench", "tools")
NOT_CODE = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


def docstring_lines(tree: ast.AST) -> set[int]:
    """The lines of every module, class and function docstring."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """The lines of `source` that hold a token of code outside a docstring."""
    docstrings = docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


def production_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*.py")
        if path.relative_to(root).parts[0] not in NOT_PRODUCTION
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def main(argv: list[str]) -> int:
    root = Path(next((a for a in argv if not a.startswith("--")), "."))
    counts = {path.relative_to(root): code_lines(path.read_text(encoding="utf-8")) for path in production_files(root)}
    if "--files" in argv:
        for path, n in sorted(counts.items(), key=lambda item: item[1]):
            print(f"{n:6,}  {path}")
    print(f"{sum(counts.values()):,} code lines in {len(counts)} production files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

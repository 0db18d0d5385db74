"""Pulling the program out of a model's answer.

LiveCodeBench's own rule takes the lines between the last two lines that contain a triple
backtick, with no label or syntax check. That rule fails on answers that end with a JSON report,
a usage example or a truncated block, so we look at whole fenced blocks first:

1. drop everything up to the last ``</think>`` (reasoning drafts are not the answer);
2. among complete fenced blocks labelled python/py/python3, take the last one that parses;
3. else the same among unlabelled blocks;
4. else the official "between the last two fence lines" rule;
in every case skipping JSON-looking blocks and blocks with no real code (comments, ``pass``,
``...``, the prompt's ``# YOUR CODE HERE`` placeholder). An unterminated final block (a
truncated answer) is ignored. ``Extraction.rule`` says which step produced the code.
"""

from __future__ import annotations

import ast
import textwrap
import warnings
from dataclasses import dataclass
from functools import lru_cache

PYTHON_LABELS = frozenset({"python", "py", "python3"})
THINK_END = "</think>"
FENCE = "```"


@dataclass(frozen=True, slots=True)
class Extraction:
    code: str | None
    rule: str  # "labelled" | "bare" | "official_fallback" | "none"


@dataclass(frozen=True, slots=True)
class _Block:
    label: str  # lower-cased first word of the info string; "" for a bare fence
    code: str


def _fence_label(line: str) -> str | None:
    """The label of a fence line (``""`` if bare), or None if the line is not a fence."""
    stripped = line.strip()
    if not stripped.startswith(FENCE):
        return None
    info = stripped.lstrip("`").strip()
    return info.split()[0].lower() if info else ""


def _complete_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    label: str | None = None  # None while outside a block
    body: list[str] = []
    for line in text.split("\n"):
        fence = _fence_label(line)
        if label is None:
            if fence is not None:
                label, body = fence, []
        elif fence == "":  # a bare fence line closes the open block
            blocks.append(_Block(label, _tidy("\n".join(body))))
            label = None
        else:
            body.append(line)
    return blocks  # a block still open at the end was truncated: dropped


def _tidy(code: str) -> str:
    return textwrap.dedent(code).strip("\n")


def _parses(code: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. invalid escape sequences in model code
            return ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _is_trivial(tree: ast.Module) -> bool:
    """Nothing but comments, ``pass``, ``...`` or bare string literals."""
    for node in tree.body:
        if isinstance(node, ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # ``...`` or a docstring-only block
        return False
    return True


def usable_code(code: str) -> bool:
    """Would we submit this block? Parses, is not JSON-looking, and holds real code."""
    head = code.lstrip()
    if not head or head[0] in "{[":
        return False
    tree = _parses(code)
    return tree is not None and not _is_trivial(tree)


def _last_usable(blocks: list[_Block]) -> str | None:
    for block in reversed(blocks):
        if usable_code(block.code):
            return block.code
    return None


def official_extract(text: str) -> str:
    """LiveCodeBench's rule: the lines strictly between the last two lines containing ```."""
    lines = text.split("\n")
    fence_rows = [i for i, line in enumerate(lines) if FENCE in line]
    if len(fence_rows) < 2:
        return ""
    return "\n".join(lines[fence_rows[-2] + 1 : fence_rows[-1]])


def extract_code(text: str | None) -> Extraction:
    if not text:
        return Extraction(None, "none")
    return _extract(text)


# Teams extract from the same reply several times (the turn's result, salvage, the vote, format
# metrics) and each extraction parses every candidate block: remember recent answers.
@lru_cache(maxsize=1024)
def _extract(text: str) -> Extraction:
    text = text.replace("\r\n", "\n")
    if THINK_END in text:
        text = text.rsplit(THINK_END, 1)[1]
    blocks = _complete_blocks(text)
    labelled = _last_usable([b for b in blocks if b.label in PYTHON_LABELS])
    if labelled is not None:
        return Extraction(labelled, "labelled")
    bare = _last_usable([b for b in blocks if b.label == ""])
    if bare is not None:
        return Extraction(bare, "bare")
    fallback = _tidy(official_extract(text))
    if usable_code(fallback):
        return Extraction(fallback, "official_fallback")
    return Extraction(None, "none")

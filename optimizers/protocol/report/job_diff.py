"""A side-by-side line diff of two prompt texts as an HTML table (seed left, deployed right).

Lines are aligned with ``difflib.SequenceMatcher``; removed lines are red on the left, added ones
green on the right, changed pairs both. Long runs of equal lines fold to a few lines of context
and a "… n unchanged lines …" row, so a one-line edit in a long prompt stays visible.
"""

from __future__ import annotations

import difflib
import html

CONTEXT = 2  # equal lines kept on each side of a change
FOLD_AT = 2 * CONTEXT + 2  # an equal run at least this long is folded


def _cell(text: str | None, css: str) -> str:
    if text is None:
        return '<td class="ln empty"></td>'
    return f'<td class="ln {css}">{html.escape(text) or "&nbsp;"}</td>'


def _row(left: str | None, right: str | None, kind: str) -> str:
    css_left = {"equal": "same", "delete": "del", "replace": "del"}.get(kind, "same")
    css_right = {"equal": "same", "insert": "add", "replace": "add"}.get(kind, "same")
    return f'<tr class="{kind}">{_cell(left, css_left)}{_cell(right, css_right)}</tr>'


def side_by_side(seed: str, deployed: str, *, left: str = "seed", right: str = "deployed") -> str:
    old, new = seed.splitlines(), deployed.splitlines()
    rows: list[str] = []
    opcodes = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    for position, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            lines = old[i1:i2]
            head = 0 if position == 0 else CONTEXT
            tail = 0 if position == len(opcodes) - 1 else CONTEXT
            if len(lines) >= FOLD_AT and len(lines) > head + tail:
                kept_head, kept_tail = lines[:head], lines[len(lines) - tail:] if tail else []
                rows.extend(_row(line, line, "equal") for line in kept_head)
                hidden = len(lines) - len(kept_head) - len(kept_tail)
                rows.append(f'<tr class="fold"><td colspan="2">… {hidden} unchanged line'
                            f'{"s" if hidden != 1 else ""} …</td></tr>')
                rows.extend(_row(line, line, "equal") for line in kept_tail)
            else:
                rows.extend(_row(line, line, "equal") for line in lines)
            continue
        removed, added = old[i1:i2], new[j1:j2]
        for index in range(max(len(removed), len(added))):
            rows.append(_row(removed[index] if index < len(removed) else None,
                             added[index] if index < len(added) else None,
                             tag if tag != "replace" or (index < len(removed) and index < len(added))
                             else ("delete" if index < len(removed) else "insert")))
    return (f'<table class="diff"><thead><tr><th class="l">{html.escape(left)}</th>'
            f'<th class="l">{html.escape(right)}</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')

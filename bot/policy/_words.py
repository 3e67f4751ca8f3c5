"""Shell words as the shell would read them: a word's value when the text alone fixes it, whether
it is a file-name pattern, what a redirection writes, and the command substitutions in the body
of an unquoted here-document (tree-sitter-bash sees `$(...)` there but not backticks).

And why a command cannot be judged by its words alone: the flags the parser (`_shell`) sets on a
command and its parts, which of them need a card, and the words the card and `policy explain`
say for each.
"""

from __future__ import annotations

import re
from typing import Literal

from tree_sitter import Node

__all__ = [
    "FLAG_WORDS",
    "HARMLESS_TARGETS",
    "UNJUDGEABLE",
    "Flag",
    "backquoted",
    "globbed",
    "literal",
    "redirect_target",
    "stdin_text",
    "text_of",
]

Flag = Literal[
    "unparsable",
    "ambiguous",
    "program",
    "substitution",
    "eval",
    "shell",
    "wrapper",
    "expansion",
    "assignment",
    "evaluates",
    "redirection",
    "writes_file",
    "glob",
]
"""Why a command cannot be judged by its words alone (see `UNJUDGEABLE`). `redirection`: any
redirection (a plain read or `2>&1` too); `writes_file`: output redirected to a file; `glob`:
an argument is a file-name pattern (informational: the program is still known)."""

UNJUDGEABLE: frozenset[Flag] = frozenset(
    {
        "unparsable",
        "ambiguous",
        "program",
        "substitution",
        "eval",
        "shell",
        "wrapper",
        "expansion",
        "assignment",
        "evaluates",
        "writes_file",
    }
)
"""Flags that make a command need approval at least under `approval = "rules"`."""

FLAG_WORDS: dict[Flag, str] = {
    "unparsable": "does not parse (or uses syntax the policy does not judge)",
    "ambiguous": "may be read differently by the shell than by the policy (a line continuation"
    " inside a word or before a comment, `;;` outside case, a control character)",
    "program": "runs a program (or wrapper) named by a pattern or an expansion, not a literal word",
    "substitution": "uses command substitution",
    "eval": "uses eval or source",
    "shell": "runs a shell (sh -c, bash script)",
    "wrapper": "runs its command through a wrapper whose inner command cannot be judged",
    "expansion": "has words that expand at run time",
    "assignment": "sets variables",
    "evaluates": "uses a bash feature that can evaluate text as code (hash, shopt, let, read,"
    " printf -v, [[ -v ]], (( )), an array subscript, ${x@P}, coproc)",
    "redirection": "redirects input or output",
    "writes_file": "writes to a file",
    "glob": "has file-name patterns",
}

_BRACE = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_GLOB = re.compile(r"(?<!\\)(?:\\\\)*[*?[]")
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
"""Files a write to changes nothing kept."""
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


def text_of(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def literal(node: Node) -> str | None:
    """The word's value if it is fixed by the text alone; None if it expands at run time."""
    kind = node.type
    text = text_of(node)
    if kind in ("word", "number"):
        if _BRACE.search(text) or text.startswith("~"):
            return None
        return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.DOTALL)
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        pieces: list[str] = []
        for child in node.named_children:
            if child.type != "string_content":
                return None
            content = text_of(child).replace("\\\n", "")
            pieces.append(re.sub(r"\\([$`\"\\])", r"\1", content))
        return "".join(pieces)
    if kind == "concatenation":
        joined = [literal(child) for child in node.named_children]
        if any(piece is None for piece in joined) or _BRACE.search(text):
            return None
        return "".join(piece for piece in joined if piece is not None)
    return None


def globbed(node: Node) -> bool:
    """Whether the word holds an unquoted `*`, `?` or `[`: the shell replaces it by the names of
    matching files, so its value depends on the disk, not the text."""
    if node.type in ("word", "number"):
        return _GLOB.search(text_of(node)) is not None
    if node.type == "concatenation":
        return any(globbed(child) for child in node.named_children)
    return False


def redirect_target(redirect: Node) -> tuple[str, bool] | None:
    """The file a `file_redirect` writes and whether the text fixes it; None when it writes no
    file (a read, `2>&1`, `>&-`, /dev/null)."""
    operator = next((text_of(c) for c in redirect.children if not c.is_named), "")
    targets = [c for c in redirect.named_children if c.type not in ("file_descriptor", "ERROR")]
    if "ERROR" in (c.type for c in redirect.named_children):
        operator = "<>"
    if operator not in _WRITES or not targets:
        return None
    target = literal(targets[0])
    if target is None:
        return text_of(targets[0]), False
    if target in HARMLESS_TARGETS or (operator == ">&" and (target.isdigit() or target == "-")):
        return None
    return target, not globbed(targets[0])


def backquoted(body: str) -> list[str] | None:
    """The commands of the backquoted substitutions in an unquoted here-document's body (its
    `\\`, `` ` `` and `$` escapes undone, as the shell does); None if a backquote is left open."""
    found: list[str] = []
    index, start = 0, -1
    while index < len(body):
        char = body[index]
        if char == "\\":
            index += 2
            continue
        if char == "`":
            if start < 0:
                start = index + 1
            else:
                found.append(re.sub(r"\\([\\`$])", r"\1", body[start:index]))
                start = -1
        index += 1
    return None if start >= 0 else found


def stdin_text(redirect: Node) -> str | None:
    """The text a here-document or here-string feeds the command (a shell runs it)."""
    if redirect.type == "heredoc_redirect":
        body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
        return text_of(body) if body is not None else None
    if redirect.type == "herestring_redirect":
        word = next((c for c in redirect.named_children), None)
        return literal(word) if word is not None else None
    return None

"""Shell commands as the policy judges them: the simple commands a command string would run.

A regex on the raw text cannot tell `echo ok; rm -rf /srv/app/x` from `echo ok`, so `run_command`
rules match parsed commands. tree-sitter-bash parses the text (as Codex's execpolicy does); every
simple command anywhere in it becomes a `SimpleCommand` (its words, unquoted), including those
inside pipes, lists, subshells, loops, functions, `$(...)`, backticks, `<(...)`, `eval` and
`sh -c '...'` (the last two parsed again). What cannot be judged from the text is flagged rather
than guessed: substitutions, `eval`, shells, expansions (`$X`, `{a,b}`), assignments (`PATH=...`
changes what runs), redirections, writes to files, and text that does not parse. Wrappers whose
inner command can be read (`timeout 5 kubectl get pods`) are peeled; the others are flagged.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Literal

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from ._wrappers import DEFERRED, SHELLS, WRAPPERS, peel, shell_script

__all__ = ["UNJUDGEABLE", "Flag", "ParsedCommand", "SimpleCommand", "parse_command"]

Flag = Literal[
    "unparsable",
    "substitution",
    "eval",
    "shell",
    "wrapper",
    "expansion",
    "assignment",
    "redirection",
    "writes_file",
]
"""Why a command cannot be judged by its words alone (see `UNJUDGEABLE`). `redirection`: any
redirection (a plain read or `2>&1` too); `writes_file`: output redirected to a file."""

UNJUDGEABLE: frozenset[Flag] = frozenset(
    {
        "unparsable",
        "substitution",
        "eval",
        "shell",
        "wrapper",
        "expansion",
        "assignment",
        "writes_file",
    }
)
"""Flags that make a command need approval at least under `approval = "rules"`."""

FLAG_WORDS: dict[Flag, str] = {
    "unparsable": "does not parse (or uses syntax the policy does not judge)",
    "substitution": "uses command substitution",
    "eval": "uses eval or source",
    "shell": "runs a shell (sh -c, bash script)",
    "wrapper": "runs its command through a wrapper whose inner command cannot be judged",
    "expansion": "has words that expand at run time",
    "assignment": "sets variables",
    "redirection": "redirects input or output",
    "writes_file": "writes to a file",
}

_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_WRITES = re.compile(r"^(&?>>?|>\||<>|>&)$")
_BRACE = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_MAX_DEPTH = 4
_EXEC_ARGS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_STRUCTURE = frozenset(
    {
        "program",
        "list",
        "pipeline",
        "subshell",
        "compound_statement",
        "negated_command",
        "do_group",
        "if_statement",
        "elif_clause",
        "else_clause",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "case_item",
        "function_definition",
        "test_command",
    }
)
"""Statements that only hold other statements (their words are walked for substitutions)."""
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: its words (wrappers peeled), as the program would receive them."""

    argv: tuple[str, ...]
    """The words, unquoted; a word that expands at run time is kept as written (flagged)."""
    text: str
    """The command as written, wrappers included."""
    wrappers: tuple[str, ...] = ()
    """The wrappers peeled off, outermost first (`sudo`, `timeout`, ...)."""
    flags: frozenset[Flag] = frozenset()
    nested: bool = False
    """Inside a substitution, `eval` or `sh -c`: it runs as part of another command."""

    @property
    def program(self) -> str:
        return self.argv[0] if self.argv else ""

    @property
    def unjudgeable(self) -> frozenset[Flag]:
        return self.flags & UNJUDGEABLE


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command string as the policy sees it."""

    text: str
    parts: tuple[SimpleCommand, ...]
    flags: frozenset[Flag]
    """Every flag of the parts, plus those of the whole (`unparsable`, a bare assignment)."""
    compound: bool
    """More than one simple command, or any pipe, list, subshell, loop or function."""

    @property
    def plain(self) -> bool:
        """One simple command and nothing else: the only kind an allowance may cover."""
        return len(self.parts) == 1 and not self.compound and not self.flags

    @property
    def unjudgeable(self) -> frozenset[Flag]:
        return self.flags & UNJUDGEABLE


def parse_command(text: str) -> ParsedCommand:
    """The simple commands of `text` and what keeps them from being judged by their words."""
    walk = _Walk(text)
    walk.source(text, depth=0, nested=False)
    parts = tuple(walk.parts)
    flags = frozenset(walk.flags).union(*(p.flags for p in parts))
    return ParsedCommand(text, parts, flags, walk.compound or len(parts) > 1)


_PARSER = Parser(Language(tree_sitter_bash.language()))


@dataclass
class _Walk:
    text: str
    parts: list[SimpleCommand] = field(default_factory=list)
    flags: set[Flag] = field(default_factory=set)
    compound: bool = False

    def source(self, text: str, *, depth: int, nested: bool) -> None:
        if depth > _MAX_DEPTH or "\x00" in text:
            self.flags.add("unparsable")
            return
        tree = _PARSER.parse(text.encode("utf-8"))
        if tree.root_node.has_error:
            self.flags.add("unparsable")  # the recovered tree is still walked, for its parts
        self.statement(tree.root_node, depth=depth, nested=nested)

    def statement(self, node: Node, *, depth: int, nested: bool) -> list[int]:
        """Walk one statement; the indexes of the parts it added (for its redirections)."""
        start = len(self.parts)
        kind = node.type
        if kind == "command":
            self.command(node, (), depth=depth, nested=nested)
        elif kind == "redirected_statement":
            body = [c for c in node.named_children if c.type not in _REDIRECTS]
            redirects = [c for c in node.named_children if c.type in _REDIRECTS]
            if len(body) == 1 and body[0].type == "command":
                self.command(body[0], tuple(redirects), depth=depth, nested=nested)
            else:
                for child in body:
                    self.statement(child, depth=depth, nested=nested)
                flags = self.redirect_flags(redirects, depth=depth)
                self.mark(start, flags)
        elif kind in ("variable_assignment", "variable_assignments", "declaration_command"):
            self.flags.add("assignment")
            self.words(node, depth=depth)
        elif kind == "unset_command":
            self.flags.add("assignment")
        elif kind == "comment" or not node.is_named:
            pass
        elif kind in _STRUCTURE:
            if kind != "program":
                self.compound = True
            for child in node.children:
                if child.type in _STATEMENTS or child.type in _STRUCTURE:
                    self.statement(child, depth=depth, nested=nested)
                else:
                    self.words(child, depth=depth)
        elif kind == "ERROR":
            self.flags.add("unparsable")
            for child in node.children:
                self.statement(child, depth=depth, nested=nested)
        else:
            self.flags.add("unparsable")
            self.words(node, depth=depth)
        return list(range(start, len(self.parts)))

    def mark(self, start: int, flags: set[Flag]) -> None:
        for index in range(start, len(self.parts)):
            part = self.parts[index]
            self.parts[index] = SimpleCommand(
                part.argv, part.text, part.wrappers, part.flags | flags, part.nested
            )

    def words(self, node: Node, *, depth: int) -> bool:
        """Walk a word (or any node) for substitutions; True if it held one."""
        if node.type in _SUBSTITUTIONS:
            self.flags.add("substitution")
            for child in node.named_children:
                self.statement(child, depth=depth + 1, nested=True)
            return True
        found = False
        for child in node.children:
            found = self.words(child, depth=depth) or found
        return found

    def redirect_flags(self, redirects: list[Node], *, depth: int) -> set[Flag]:
        flags: set[Flag] = set()
        for outer in redirects:
            flags.add("redirection")
            if self.words(outer, depth=depth):
                flags.add("substitution")
            for redirect in (outer, *outer.named_children):
                if redirect.type == "file_redirect" and _writes(redirect):
                    flags.add("writes_file")
        return flags

    def command(self, node: Node, redirects: tuple[Node, ...], *, depth: int, nested: bool) -> None:
        flags: set[Flag] = set()
        argv: list[str] = []
        words: list[Node] = []
        for child in node.named_children:
            if child.type == "variable_assignment":
                flags.add("assignment")
                if self.words(child, depth=depth):
                    flags.add("substitution")
            elif child.type in _REDIRECTS:
                redirects = (*redirects, child)
            elif child.type == "command_name":
                words.extend(child.named_children)
            else:
                words.append(child)
        for redirect in redirects:  # `echo >out x`: tree-sitter puts `x` in the redirection
            extra = [c for c in redirect.named_children if c.type != "file_descriptor"][1:]
            if redirect.type == "file_redirect":
                words.extend(extra)
        for word in words:
            if self.words(word, depth=depth):
                flags.add("substitution")
            literal = _literal(word)
            if literal is None:
                flags.add("expansion")
            argv.append(literal if literal is not None else _text(word))
        flags |= self.redirect_flags(list(redirects), depth=depth)
        self.simple(tuple(argv), _text(node), frozenset(flags), depth=depth, nested=nested)

    def simple(
        self, argv: tuple[str, ...], text: str, flags: frozenset[Flag], *, depth: int, nested: bool
    ) -> None:
        wrappers: list[str] = []
        extra: set[Flag] = set()
        while argv and os.path.basename(argv[0]) in WRAPPERS:
            name = os.path.basename(argv[0])
            inner = peel(argv, WRAPPERS[name], env=name == "env")
            if inner is None:
                extra.add("wrapper")
                break
            if not inner:
                break  # `env`, `time` alone: the wrapper is the command
            if not WRAPPERS[name].judgeable:
                extra.add("wrapper")
            wrappers.append(name)
            argv = inner
        program = os.path.basename(argv[0]) if argv else ""
        script: str | None = None
        if program in DEFERRED:
            extra.add("eval")
            script = " ".join(argv[1:]) if program == "eval" else None
        elif program in SHELLS:
            extra.add("shell")
            script = shell_script(argv)
        elif program in ("su", "runuser") or (program == "find" and _EXEC_ARGS & set(argv)):
            extra.add("wrapper")  # su -c SCRIPT, find -exec CMD: a command the words hide
        self.parts.append(SimpleCommand(argv, text, tuple(wrappers), flags | extra, nested))
        if script:  # what eval and sh -c run is judged too (the strictest part wins)
            self.source(script, depth=depth + 1, nested=True)


_STATEMENTS = frozenset(
    {
        "command",
        "redirected_statement",
        "variable_assignment",
        "variable_assignments",
        "declaration_command",
        "unset_command",
        "comment",
        "ERROR",
    }
)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _literal(node: Node) -> str | None:
    """The word's value if it is fixed by the text alone; None if it expands at run time."""
    kind = node.type
    text = _text(node)
    if kind in ("word", "number"):
        if _BRACE.search(text) or text.startswith("~"):
            return None
        return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        pieces: list[str] = []
        for child in node.named_children:
            if child.type != "string_content":
                return None
            pieces.append(re.sub(r"\\([$`\"\\\n])", r"\1", _text(child)))
        return "".join(pieces)
    if kind == "concatenation":
        joined = [_literal(child) for child in node.named_children]
        if any(piece is None for piece in joined) or _BRACE.search(text):
            return None
        return "".join(piece for piece in joined if piece is not None)
    return None


def _writes(redirect: Node) -> bool:
    """Whether a file redirection writes a file (not /dev/null, not `2>&1`)."""
    operator = next((c.text or b"" for c in redirect.children if not c.is_named), b"").decode()
    targets = [c for c in redirect.named_children if c.type != "file_descriptor"]
    target = _literal(targets[0]) if targets else None
    if not _WRITES.match(operator) or target in _HARMLESS_TARGETS:
        return False
    return not (operator == ">&" and (target or "").isdigit())

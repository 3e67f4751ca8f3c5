"""Shell commands as the policy judges them: the simple commands a command string would run.

A regex on the raw text cannot tell `echo ok; rm -rf /srv/app/x` from `echo ok`, so `run_command`
rules match parsed commands. tree-sitter-bash parses the text (as Codex's execpolicy does); every
simple command anywhere in it becomes a `SimpleCommand` (its words, unquoted), including those
inside pipes, lists, subshells, loops, functions, `$(...)`, backticks, `<(...)`, unquoted
here-documents, `eval` and `sh -c '...'` (the last two parsed again). Wrappers whose options are
known are peeled (`setsid rm x` is judged as `rm x`), assignment words after them included.

It fails closed: what cannot be judged from the text is flagged, never guessed, and a flagged
call needs a card (`UNJUDGEABLE`). Flagged are: a program word that is not a literal (`r[m]`,
`$CMD`), substitutions, `eval`, shells, expansions, assignments, writes to files (a bare
`> /etc/motd` is a command too), bash builtins that evaluate text, text that does not parse, and
text tree-sitter-bash and bash may read differently (a backslash-newline whose removal changes
the reading, whose other reading is judged too; `;;` outside `case`; a control character).
Where tree-sitter-bash misfiles a command (the rest of a here-document's line, a `<<-` body),
the walk finds it (`_Walk.redirections`, `_Walk.heredoc`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from ._words import (
    HARMLESS_TARGETS,
    UNJUDGEABLE,
    Flag,
    backquoted,
    globbed,
    literal,
    redirect_target,
    stdin_text,
    text_of,
)
from ._wrappers import DEFERRED, SHELLS, WRAPPERS, evaluates, find_exec, peel, shell_script

__all__ = ["ParsedCommand", "SimpleCommand", "parse_command"]

_MAX_DEPTH = 4
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
_CONTROL = re.compile(r"[\x01-\x08\x0b-\x1f\x7f]")
_CASE_ENDS = frozenset({";;", ";&", ";;&"})
_ARITHMETIC_TESTS = frozenset({"-v", "-R", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: its words (wrappers peeled), as the program would receive them."""

    argv: tuple[str, ...]
    """The words, unquoted; a word that expands at run time is kept as written (flagged). Empty
    for a bare redirection (`> /etc/motd`)."""
    text: str
    """The command as written, wrappers included."""
    wrappers: tuple[str, ...] = ()
    """The wrappers peeled off, outermost first (`sudo`, `timeout`, ...)."""
    flags: frozenset[Flag] = frozenset()
    nested: bool = False
    """Inside a substitution, `eval` or `sh -c`: it runs as part of another command."""
    writes: tuple[str, ...] = ()
    """The files it writes through redirections or a wrapper's output option, as written
    (`/dev/null` left out); each one flags `writes_file`, so a rule must allow the target."""
    patterns: tuple[int, ...] = ()
    """Where in `argv` a word is a file-name pattern (`n[s]`): the shell replaces it by the
    names of matching files, so a rule's fixed word there may match what runs (flag `glob`)."""
    assignments: tuple[str, ...] = ()
    """The `NAME=VALUE` words it runs with (`A=1 cmd`, `env A=1 cmd`; flag `assignment`),
    unquoted where the text fixes them: `KUBECONFIG=...` or `PATH=...` change what it does."""

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
        """One simple command, fully understood, and nothing else: the only kind an allowance
        may cover."""
        return len(self.parts) == 1 and not self.compound and not self.flags

    @property
    def unjudgeable(self) -> frozenset[Flag]:
        return self.flags & UNJUDGEABLE


def parse_command(text: str) -> ParsedCommand:
    """The simple commands of `text` and what keeps them from being judged by their words."""
    walk = _Walk()
    try:
        walk.source(text, depth=0, nested=False)
    except RecursionError:  # nested deeper than the walk can follow: judged as unreadable
        return ParsedCommand(text, (), frozenset({"unparsable"}), True)
    parts = tuple(walk.parts)
    flags = frozenset(walk.flags).union(*(p.flags for p in parts))
    return ParsedCommand(text, parts, flags, walk.compound or len(parts) > 1)


_PARSER = Parser(Language(tree_sitter_bash.language()))


def _reading(part: SimpleCommand) -> tuple[object, ...]:
    return part.argv, part.nested, part.writes, part.wrappers


@dataclass
class _Walk:
    parts: list[SimpleCommand] = field(default_factory=list)
    flags: set[Flag] = field(default_factory=set)
    compound: bool = False
    joined: bool = False
    """This walk reads the text with its backslash-newlines removed (as bash does)."""

    def source(self, text: str, *, depth: int, nested: bool) -> None:
        if depth > _MAX_DEPTH or "\x00" in text:
            self.flags.add("unparsable")
            return
        tree = _PARSER.parse(text.encode("utf-8"))
        if tree.root_node.has_error:
            self.flags.add("unparsable")  # the recovered tree is still walked, for its parts
        start = len(self.parts)
        self.statement(tree.root_node, depth=depth, nested=nested)
        if _stray_case_end(tree.root_node) or _CONTROL.search(text):
            self.flags.add("ambiguous")  # tree-sitter-bash splits words at `\r`, bash does not
        if "\\\n" in text and not self.joined:
            self.continuations(text, start, depth=depth, nested=nested)

    def continuations(self, text: str, start: int, *, depth: int, nested: bool) -> None:
        """bash removes each backslash-newline before reading words and comments; where doing so
        changes what tree-sitter-bash reads, the call is ambiguous and both readings are judged."""
        other = _Walk(joined=True)
        other.source(text.replace("\\\n", ""), depth=depth, nested=nested)
        if [_reading(p) for p in self.parts[start:]] != [_reading(p) for p in other.parts]:
            self.flags |= {"ambiguous", *other.flags}
            self.parts.extend(other.parts)
            self.compound = True

    def statement(self, node: Node, *, depth: int, nested: bool) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, (), depth=depth, nested=nested)
        elif kind == "redirected_statement":
            body = [c for c in node.named_children if c.type not in _REDIRECTS]
            redirects = tuple(c for c in node.named_children if c.type in _REDIRECTS)
            if len(body) == 1 and body[0].type == "command":
                self.command(body[0], redirects, depth=depth, nested=nested)
            elif not body:  # `> /etc/motd`: a command of its own, that truncates a file
                self.command(None, redirects, depth=depth, nested=nested, text=text_of(node))
            else:
                start = len(self.parts)
                for child in body:
                    self.statement(child, depth=depth, nested=nested)
                flags, writes = self.redirections(redirects, depth=depth, nested=nested)
                self.mark(start, flags, writes)
        elif kind in ("variable_assignment", "variable_assignments", "declaration_command"):
            self.flags.add("assignment")
            self.words(node, depth=depth)
        elif kind == "unset_command":
            self.flags.add("assignment")
        elif kind == "comment" or not node.is_named:
            pass
        elif kind in _STRUCTURE:
            self.structure(node, depth=depth, nested=nested)
        elif kind == "ERROR":
            self.flags.add("unparsable")
            for child in node.children:
                self.statement(child, depth=depth, nested=nested)
        else:
            self.flags.add("unparsable")
            self.words(node, depth=depth)

    def structure(self, node: Node, *, depth: int, nested: bool) -> None:
        kind = node.type
        if kind != "program":
            self.compound = True
        opener = text_of(node.children[0]) if node.children else ""
        if kind == "c_style_for_statement" or opener == "((":
            self.flags.add("evaluates")  # arithmetic evaluates array subscripts, `$(...)` in them
        leaves = _leaves(node) if kind == "test_command" else set()
        if (opener == "[[" and leaves & _ARITHMETIC_TESTS) or leaves & {"-v", "-R"}:
            self.flags.add("evaluates")  # `[[ -v 'a[$(...)]' ]]`, `[[ $x -eq 1 ]]` evaluate
        for child in node.children:
            if child.type in _STATEMENTS or child.type in _STRUCTURE:
                self.statement(child, depth=depth, nested=nested)
            else:
                self.words(child, depth=depth)

    def mark(self, start: int, flags: set[Flag], writes: tuple[str, ...]) -> None:
        if start == len(self.parts):
            self.flags |= flags
        for index in range(start, len(self.parts)):
            part = self.parts[index]
            self.parts[index] = SimpleCommand(
                part.argv,
                part.text,
                part.wrappers,
                part.flags | flags,
                part.nested,
                part.writes + writes,
                part.patterns,
                part.assignments,
            )

    def words(self, node: Node, *, depth: int) -> bool:
        """Walk a word (or any node) for substitutions; True if it held one."""
        if node.type in _SUBSTITUTIONS:
            self.flags.add("substitution")
            for child in node.named_children:
                self.statement(child, depth=depth + 1, nested=True)
            return True
        kinds = {c.type for c in node.children}
        if node.type in ("subscript", "arithmetic_expansion") or (
            node.type == "expansion" and {"@", "!"} & kinds
        ):
            self.flags.add("evaluates")  # `${a[...]}` is arithmetic; `${x@P}` runs `$(...)`
        elif node.type == "expansion" and kinds != {"${", "variable_name", "}"}:
            self.flags.add("expansion")  # `${HOME:'a[$(...)]'}` runs it, in a for list too
        found = False
        for child in node.children:
            found = self.words(child, depth=depth) or found
        return found

    def redirections(
        self, redirects: tuple[Node, ...], *, depth: int, nested: bool
    ) -> tuple[set[Flag], tuple[str, ...]]:
        flags: set[Flag] = set()
        writes: list[str] = []
        for redirect in redirects:
            flags.add("redirection")
            heredoc = redirect.type == "heredoc_redirect"
            for child in redirect.named_children if heredoc else [redirect]:
                if child.type in _STATEMENTS or child.type in _STRUCTURE:
                    self.compound = True  # `cat <<EOF && rm y`: tree-sitter nests the rest here
                    self.statement(child, depth=depth, nested=nested)
                elif self.words(child, depth=depth):
                    flags.add("substitution")
            if redirect.type == "heredoc_redirect" and self.heredoc(redirect, depth=depth):
                flags.add("substitution")
            for inner in (redirect, *redirect.named_children):  # `<<EOF > out` nests `> out`
                target = redirect_target(inner) if inner.type == "file_redirect" else None
                if target is not None:
                    flags.add("writes_file")
                    writes.append(target[0])
                    if not target[1]:
                        flags.add("expansion")
        return flags, tuple(writes)

    def heredoc(self, redirect: Node, *, depth: int) -> bool:
        """Judge the substitutions of an unquoted here-document's body (the shell runs them);
        True if it held any. tree-sitter-bash parses `$(...)` in a `<<` body, not backquotes
        nor anything in a `<<-` body: those are found here."""
        start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
        body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
        if start is None or body is None or set(text_of(start)) & set("'\"\\"):
            return False
        text = text_of(body)
        found = False
        if "<<-" in (c.type for c in redirect.children):  # its lines lose their leading tabs
            text = "".join(line.lstrip("\t") for line in _body_lines(redirect))
            again = _PARSER.parse(f": <<{text_of(start)}\n{text}{text_of(start)}\n".encode())
            bodies = [n for n in _descendants(again.root_node) if n.type == "heredoc_body"]
            found = any([self.words(b, depth=depth) for b in bodies])
        scripts = backquoted(text)
        if scripts is None:
            self.flags.add("unparsable")
            return found
        for script in scripts:
            self.source(script, depth=depth + 1, nested=True)
        return found or bool(scripts)

    def command(
        self,
        node: Node | None,
        redirects: tuple[Node, ...],
        *,
        depth: int,
        nested: bool,
        text: str = "",
    ) -> None:
        flags: set[Flag] = set()
        words: list[Node] = []
        assignments: list[str] = []
        for child in node.named_children if node is not None else ():
            if child.type == "variable_assignment":
                flags.add("assignment")
                assignments.append(_assignment(child))
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
                words.extend(w for w in extra if w.type != "ERROR")
        argv: list[str] = []
        kinds: list[str] = []
        for word in words:
            if self.words(word, depth=depth):
                flags.add("substitution")
            value = literal(word)
            if value is None:
                flags.add("expansion")
            argv.append(value if value is not None else text_of(word))
            kinds.append("expansion" if value is None else "pattern" if globbed(word) else "")
        more, writes = self.redirections(redirects, depth=depth, nested=nested)
        flags |= more
        text = text_of(node) if node is not None else text
        if "pattern" in kinds:
            flags.add("glob")
        stdin = next((s for s in map(stdin_text, redirects) if s is not None), None)
        self.simple(
            tuple(argv),
            tuple(kinds),
            text,
            flags,
            writes,
            depth=depth,
            nested=nested,
            stdin=stdin,
            assignments=tuple(assignments),
        )

    def simple(
        self,
        argv: tuple[str, ...],
        kinds: tuple[str, ...],
        text: str,
        flags: set[Flag],
        writes: tuple[str, ...],
        *,
        depth: int,
        nested: bool,
        stdin: str | None = None,
        assignments: tuple[str, ...] = (),
    ) -> None:
        wrappers: list[str] = []
        script: str | None = None
        offset = 0
        while argv and os.path.basename(argv[0]) in WRAPPERS:
            name = os.path.basename(argv[0])
            peeled = peel(argv, WRAPPERS[name])
            if peeled is None:
                flags.add("wrapper")
                break
            writes += tuple(w for w in peeled.writes if w not in HARMLESS_TARGETS)
            if not WRAPPERS[name].judgeable:
                flags.add("wrapper")
            if peeled.script is not None:
                flags.add("shell")  # `su -c SCRIPT`, `flock F -c SCRIPT`: parsed again below
                script = peeled.script
                break
            if not peeled.argv:
                break  # `env`, `time` alone: the wrapper is the command
            flags |= {"assignment"} if peeled.assignments else set()
            assignments += peeled.assignments
            wrappers.append(name)
            offset += len(argv) - len(peeled.argv)
            argv = peeled.argv
        if any(kinds[: offset + 1]):
            flags.add("program")  # `/usr/bin/r[m]`, `timeout 5* ls`: what runs is not in the text
        flags |= {"writes_file"} if writes else set()
        program = os.path.basename(argv[0]) if argv else ""
        if program in DEFERRED:
            flags.add("eval")
            script = " ".join(argv[1:]) if program == "eval" else None
        elif program in SHELLS:
            flags.add("shell")
            script = shell_script(argv)
            if script is None and all(w.startswith("-") for w in argv[1:]):
                script = stdin  # `bash <<EOF ... EOF`, `sh -s <<< '...'`: the script is stdin
        hidden = find_exec(argv) if program == "find" else []
        if hidden:
            flags.add("wrapper")  # find -exec CMD ;: a command run once per file, judged too
        if evaluates(argv) or "coproc" in wrappers:
            flags.add("evaluates")
        patterns = tuple(i - offset for i, kind in enumerate(kinds) if kind == "pattern")
        part = SimpleCommand(
            argv, text, tuple(wrappers), frozenset(flags), nested, writes, patterns, assignments
        )
        self.parts.append(part)
        if script:  # what eval and sh -c run is judged too (the strictest part wins)
            self.source(script, depth=depth + 1, nested=True)
        for start, end in hidden:
            words = kinds[offset + start : offset + end]
            self.simple(argv[start:end], words, text, {"wrapper"}, (), depth=depth, nested=True)


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


def _body_lines(redirect: Node) -> list[str]:
    """The lines of a here-document's body as written (between its operator's line and its
    delimiter's), each with its newline."""
    return text_of(redirect).splitlines(keepends=True)[1:-1]


def _descendants(node: Node) -> list[Node]:
    found: list[Node] = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(current.children)
    return found


def _assignment(node: Node) -> str:
    """`NAME=VALUE` with its value unquoted when the text fixes it, else as written."""
    name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
    fixed = "" if value is None else literal(value)
    if name is None or fixed is None:
        return text_of(node)
    return f"{text_of(name)}={fixed}"


def _leaves(node: Node) -> set[str]:
    """The texts of a node's leaves (operators and words)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current.child_count == 0:
            found.add(text_of(current))
        stack.extend(current.children)
    return found


def _stray_case_end(root: Node) -> bool:
    """Whether a `;;` (or `;&`, `;;&`) stands outside a `case` item: tree-sitter-bash reads it as
    a separator, bash refuses the text."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _CASE_ENDS and (node.parent is None or node.parent.type != "case_item"):
            return True
        stack.extend(node.children)
    return False

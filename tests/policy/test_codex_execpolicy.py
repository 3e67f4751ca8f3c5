"""OpenAI Codex's command-policy test cases, judged by OpsGate: each must be at least as strict.

Provenance: the public repository openai/codex. The cases (commands and what Codex decides)
are transcribed from its tests, never its code:
- codex-rs/execpolicy/tests/basic.rs (prefix rules; each test's own policy, written here as
  TOML; the test's fallback for commands no rule matches, `allow_all` or `prompt_all`, is the
  tool's `default`, "never" or "always"),
- codex-rs/execpolicy/examples/example.codexpolicy (its `match` / `not_match` lists),
- codex-rs/execpolicy/tests/{ls,head,cp,pwd,sed,literal}.rs at commit c5ec5cc3 (the earlier,
  typed-argument policy: a verified call of a read-only program is "allow", an error is
  "prompt", and a verified call that writes files, `cp`, is "prompt": Codex asked unless the
  file lay in a writable root, and OpsGate has none),
- codex-rs/core/src/command_safety/is_safe_command.rs (what runs without asking when no rule
  matches: "allow"; everything else "prompt") and is_dangerous_command.rs ("prompt").
Cases without a policy of their own are judged under tests/fixtures/policies/
codex_execpolicy.toml, Codex's example rules and known-safe commands as OpsGate rules.

A Codex argv is written as the shell text that gives that argv (`shlex.join`). OpsGate's
strictness: forbidden > a card > runs freely, as Codex's forbidden > prompt > allow. Where
OpsGate is less strict the case is in `LESS_STRICT` with the reason, and that is asserted too.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from agent_core import ToolCall
from bot.policy import Policy

FIXTURE = Path(__file__).parents[1] / "fixtures" / "policies" / "codex_execpolicy.toml"
Decision = Literal["allow", "prompt", "forbidden"]
RANK = {"allow": 0, "prompt": 1, "forbidden": 2, "never": 0, "always": 1}


@dataclass(frozen=True, slots=True)
class Case:
    test: str
    """Where in openai/codex: `<file>::<test>`."""
    command: str
    codex: Decision
    policy: str | None = None
    """The Codex test's own policy as OpsGate TOML; None: the fixture."""

    @property
    def id(self) -> str:
        return f"{self.test.split('::')[-1]}: {self.command}"


def sh(*argv: str) -> str:
    return shlex.join(argv)


def toml(default: str, *rules: tuple[list[str], str]) -> str:
    """A run_command policy: `rules` as (prefix, Codex decision), unmatched → `default`."""
    tier = {"allow": "never", "prompt": "always", "forbidden": "forbidden"}
    text = f'[tools.run_command]\napproval = "rules"\ndefault = "{default}"\n'
    for prefix, decision in rules:
        text += f"[[tools.run_command.rules]]\nprefix = {json.dumps(prefix)}\n"
        text += f'approval = "{tier[decision]}"\n'
    return text


ALLOW_ALL, PROMPT_ALL = "never", "always"
GIT_PROMPT_COMMIT_FORBIDDEN = toml(ALLOW_ALL, (["git"], "prompt"), (["git", "commit"], "forbidden"))
SHELL_ALIASES = toml(
    ALLOW_ALL,
    *((list(p), "allow") for p in [("bash", "-c"), ("bash", "-l"), ("sh", "-c"), ("sh", "-l")]),
)
NPM_ALIASES = toml(
    ALLOW_ALL,
    *(
        (["npm", verb, flag], "allow")
        for verb in ("i", "install")
        for flag in ("--legacy-peer-deps", "--no-save")
    ),
)
B = "codex-rs/execpolicy/tests/basic.rs::"
BASIC = [
    Case(B + "basic_match", "git status", "allow", toml(ALLOW_ALL, (["git", "status"], "allow"))),
    Case(
        B + "justification_is_attached_to_forbidden_matches",
        "rm -rf /some/important/folder",
        "forbidden",
        toml(ALLOW_ALL, (["rm"], "forbidden")),
    ),
    Case(
        B + "justification_can_be_used_with_allow_decision",
        "ls -l",
        "allow",
        toml(PROMPT_ALL, (["ls"], "allow")),
    ),
    Case(
        B + "add_prefix_rule_extends_policy",
        "ls -l /some/important/folder",
        "prompt",
        toml(ALLOW_ALL, (["ls", "-l"], "prompt")),
    ),
    Case(B + "parses_multiple_policy_files", "git status", "prompt", GIT_PROMPT_COMMIT_FORBIDDEN),
    Case(
        B + "parses_multiple_policy_files",
        "git commit -m hi",
        "forbidden",
        GIT_PROMPT_COMMIT_FORBIDDEN,
    ),
    Case(
        B + "only_first_token_alias_expands_to_multiple_rules",
        "bash -c echo hi",
        "allow",
        SHELL_ALIASES,
    ),
    Case(
        B + "only_first_token_alias_expands_to_multiple_rules",
        "sh -l echo hi",
        "allow",
        SHELL_ALIASES,
    ),
    Case(
        B + "tail_aliases_are_not_cartesian_expanded",
        "npm i --legacy-peer-deps",
        "allow",
        NPM_ALIASES,
    ),
    Case(
        B + "tail_aliases_are_not_cartesian_expanded",
        "npm install --no-save leftpad",
        "allow",
        NPM_ALIASES,
    ),
    Case(
        B + "match_and_not_match_examples_are_enforced",
        "git status",
        "allow",
        toml(ALLOW_ALL, (["git", "status"], "allow")),
    ),
    Case(
        B + "match_and_not_match_examples_are_enforced",
        "git --config color.status=always status",
        "allow",
        toml(ALLOW_ALL, (["git", "status"], "allow")),
    ),
    Case(
        B + "strictest_decision_wins_across_matches",
        "git commit -m hi",
        "forbidden",
        GIT_PROMPT_COMMIT_FORBIDDEN,
    ),
    Case(
        B + "strictest_decision_across_multiple_commands",
        "git status && git commit -m hi",
        "forbidden",
        GIT_PROMPT_COMMIT_FORBIDDEN,
    ),
    # An empty policy with the `prompt_all` fallback: a tool that always asks.
    Case(
        B + "heuristics_match_is_returned_when_no_policy_matches",
        "python",
        "prompt",
        '[tools.run_command]\napproval = "always"\n',
    ),
    # `host_executable` (which absolute paths count as a program) has no OpsGate twin: a path
    # always matches by its base name, which only ever asks more.
    Case(
        B + "host_executable_resolution_uses_basename_rule_when_allowed",
        "/usr/bin/git status",
        "prompt",
        toml(ALLOW_ALL, (["git", "status"], "prompt")),
    ),
    Case(
        B + "host_executable_resolution_respects_explicit_empty_allowlist",
        "/usr/bin/git status",
        "allow",
        toml(ALLOW_ALL, (["git"], "prompt")),
    ),
    Case(
        B + "host_executable_resolution_ignores_path_not_in_allowlist",
        "/opt/homebrew/bin/git status",
        "allow",
        toml(ALLOW_ALL, (["git"], "prompt")),
    ),
    Case(
        B + "host_executable_resolution_falls_back_without_mapping",
        "/usr/bin/git status",
        "prompt",
        toml(ALLOW_ALL, (["git"], "prompt")),
    ),
    Case(
        B + "host_executable_resolution_does_not_override_exact_match",
        "/usr/bin/git status",
        "allow",
        toml(ALLOW_ALL, (["/usr/bin/git"], "allow"), (["git"], "prompt")),
    ),
]

E = "codex-rs/execpolicy/examples/example.codexpolicy::"
EXAMPLE = [
    Case(E + "git reset --hard", "git reset --hard", "forbidden"),
    Case(E + "git reset --hard not_match", "git reset --keep", "prompt"),
    Case(E + "git reset --hard not_match", "git reset --merge", "prompt"),
    *(Case(E + "ls", command, "allow") for command in ("ls", "ls -l", "ls -a .")),
    Case(E + "cat", "cat file.txt", "allow"),
    Case(E + "cat", "cat -n README.md", "allow"),
    Case(E + "cp", "cp foo bar", "prompt"),
    Case(E + "cp", "cp -r src dest", "prompt"),
    Case(E + "head", "head README.md", "allow"),
    Case(E + "head", "head -n 5 CHANGELOG.md", "allow"),
    Case(E + "head not_match", "hea -n 1,5p CHANGELOG.md", "prompt"),
    Case(E + "printenv", "printenv", "allow"),
    Case(E + "printenv", "printenv PATH", "allow"),
    Case(E + "printenv not_match", "print -0", "prompt"),
    Case(E + "pwd", "pwd", "allow"),
    Case(E + "which", "which python3", "allow"),
    Case(E + "which", "which -a python3", "allow"),
]

L = "codex-rs/execpolicy/tests/"
FAKE = toml(PROMPT_ALL, (["fake_executable", "subcommand", "sub-subcommand"], "allow"))
LEGACY = [
    Case(L + "ls.rs::test_ls_no_args", "ls", "allow"),
    Case(L + "ls.rs::test_ls_dash_a_dash_l", "ls -a -l", "allow"),
    Case(L + "ls.rs::test_ls_dash_z", "ls -z", "prompt"),
    Case(L + "ls.rs::test_ls_dash_al", "ls -al", "prompt"),
    Case(L + "ls.rs::test_ls_one_file_arg", "ls foo", "allow"),
    Case(L + "ls.rs::test_ls_multiple_file_args", "ls foo bar baz", "allow"),
    Case(L + "ls.rs::test_ls_multiple_flags_and_file_args", "ls -l -a foo bar baz", "allow"),
    Case(L + "ls.rs::test_flags_after_file_args", "ls foo -l", "allow"),
    Case(L + "head.rs::test_head_no_args", "head", "prompt"),
    Case(L + "head.rs::test_head_one_file_no_flags", "head src/extension.ts", "allow"),
    Case(L + "head.rs::test_head_one_flag_one_file", "head -n 100 src/extension.ts", "allow"),
    Case(L + "head.rs::test_head_invalid_n_as_0", "head -n 0 src/extension.ts", "prompt"),
    Case(
        L + "head.rs::test_head_invalid_n_as_nonint_float", "head -n 1.5 src/extension.ts", "prompt"
    ),
    Case(L + "head.rs::test_head_invalid_n_as_float", "head -n 1.0 src/extension.ts", "prompt"),
    Case(
        L + "head.rs::test_head_invalid_n_as_negative_int", "head -n -1 src/extension.ts", "prompt"
    ),
    Case(L + "cp.rs::test_cp_no_args", "cp", "prompt"),
    Case(L + "cp.rs::test_cp_one_arg", "cp foo/bar", "prompt"),
    Case(L + "cp.rs::test_cp_one_file", "cp foo/bar ../baz", "prompt"),
    Case(L + "cp.rs::test_cp_multiple_files", "cp foo bar baz", "prompt"),
    Case(L + "pwd.rs::test_pwd_no_args", "pwd", "allow"),
    Case(L + "pwd.rs::test_pwd_capital_l", "pwd -L", "allow"),
    Case(L + "pwd.rs::test_pwd_capital_p", "pwd -P", "allow"),
    Case(L + "pwd.rs::test_pwd_extra_args", "pwd foo bar", "prompt"),
    Case(L + "sed.rs::test_sed_print_specific_lines", "sed -n 122,202p hello.txt", "allow"),
    Case(
        L + "sed.rs::test_sed_print_specific_lines_with_e_flag",
        "sed -n -e 122,202p hello.txt",
        "allow",
    ),
    Case(
        L + "sed.rs::test_sed_reject_dangerous_command",
        sh("sed", "-e", "s/y/echo hi/e", "hello.txt"),
        "prompt",
    ),
    Case(L + "sed.rs::test_sed_verify_e_or_pattern_is_required", "sed 122,202p", "prompt"),
    Case(
        L + "literal.rs::test_invalid_subcommand",
        "fake_executable subcommand sub-subcommand",
        "allow",
        FAKE,
    ),
    Case(
        L + "literal.rs::test_invalid_subcommand",
        "fake_executable subcommand not-a-real-subcommand",
        "prompt",
        FAKE,
    ),
]

S = "codex-rs/core/src/command_safety/is_safe_command.rs::"
UNSAFE_FIND = [
    sh("find", ".", "-name", "file.txt", "-exec", "rm", "{}", ";"),
    sh("find", ".", "-name", "*.py", "-execdir", "python3", "{}", ";"),
    sh("find", ".", "-name", "file.txt", "-ok", "rm", "{}", ";"),
    sh("find", ".", "-name", "*.py", "-okdir", "python3", "{}", ";"),
    sh("find", ".", "-delete", "-name", "file.txt"),
    sh("find", ".", "-fls", "/etc/passwd"),
    sh("find", ".", "-fprint", "/etc/passwd"),
    sh("find", ".", "-fprint0", "/etc/passwd"),
    sh("find", ".", "-fprintf", "/root/suid.txt", "%#m %u %p\n"),
]
SAFE = [
    *(
        Case(S + "known_safe_examples", command, "allow")
        for command in (
            "ls",
            "git status",
            "git branch",
            "git branch --show-current",
            "base64",
            "sed -n 1,5p file.txt",
            "nl -nrz Cargo.toml",
            "find . -name file.txt",
            "numfmt 1000",
            "tac Cargo.toml",
        )
    ),
    Case(S + "git_branch_mutating_flags_are_not_safe", "git branch -d feature", "prompt"),
    Case(S + "git_branch_mutating_flags_are_not_safe", "git branch new-branch", "prompt"),
    Case(
        S + "git_branch_global_options_respect_safety_rules",
        "git -C . branch --show-current",
        "allow",
    ),
    Case(
        S + "git_branch_global_options_respect_safety_rules", "git -C . branch -d feature", "prompt"
    ),
    Case(
        S + "git_branch_global_options_respect_safety_rules",
        sh("bash", "-lc", "git -C . branch -d feature"),
        "prompt",
    ),
    Case(S + "git_first_positional_is_the_subcommand", "git checkout status", "prompt"),
    *(
        Case(S + "git_output_and_config_override_flags_are_not_safe", command, "prompt")
        for command in (
            "git log --output=/tmp/git-log-out-test -n 1",
            "git diff --output /tmp/git-diff-out-test",
            "git show --output=/tmp/git-show-out-test HEAD",
            "git -c core.pager=cat log -n 1",
            "git -ccore.pager=cat status",
        )
    ),
    Case(S + "cargo_check_is_not_safe", "cargo check", "prompt"),
    Case(S + "zsh_lc_safe_command_sequence", "zsh -lc ls", "allow"),
    *(
        Case(S + "unknown_or_partial", command, "prompt")
        for command in ("foo", "git fetch", "sed -n xp file.txt", *UNSAFE_FIND)
    ),
    *(
        Case(S + "base64_output_options_are_unsafe", command, "prompt")
        for command in (
            "base64 -o out.bin",
            "base64 --output out.bin",
            "base64 --output=out.bin",
            "base64 -ob64.txt",
        )
    ),
    Case(S + "ripgrep_rules", "rg Cargo.toml -n", "allow"),
    *(
        Case(S + "ripgrep_rules", command, "prompt")
        for command in (
            "rg --search-zip files",
            "rg -z files",
            "rg --pre pwned files",
            "rg --pre=pwned files",
            "rg --hostname-bin pwned files",
            "rg --hostname-bin=pwned files",
        )
    ),
    *(
        Case(S + "bash_lc_safe_examples", sh("bash", "-lc", script), "allow")
        for script in (
            "ls",
            "ls -1",
            "git status",
            'grep -R "Cargo.toml" -n',
            "sed -n 1,5p file.txt",
            "sed -n '1,5p' file.txt",
            "find . -name file.txt",
        )
    ),
    *(
        Case(S + "bash_lc_safe_examples_with_operators", sh("bash", "-lc", script), "allow")
        for script in (
            'grep -R "Cargo.toml" -n || true',
            "ls && pwd",
            "echo 'hi' ; ls",
            "ls | wc -l",
        )
    ),
    Case(S + "bash_lc_unsafe_examples", "bash -lc git status", "prompt"),
    *(
        Case(S + "bash_lc_unsafe_examples", sh("bash", "-lc", script), "prompt")
        for script in (
            "'git status'",
            "find . -name file.txt -delete",
            "ls && rm -rf /",
            "(ls)",
            "ls || (pwd && echo hi)",
            "ls > out.txt",
        )
    ),
]

D = "codex-rs/core/src/command_safety/is_dangerous_command.rs::"
DANGEROUS = [
    Case(D + "git_reset_is_dangerous", "git reset", "prompt"),
    Case(D + "bash_git_reset_is_dangerous", sh("bash", "-lc", "git reset --hard"), "prompt"),
    Case(D + "zsh_git_reset_is_dangerous", sh("zsh", "-lc", "git reset --hard"), "prompt"),
    Case(D + "sudo_git_reset_is_dangerous", "sudo git reset --hard", "prompt"),
    Case(D + "usr_bin_git_is_dangerous", "/usr/bin/git reset --hard", "prompt"),
    Case(D + "rm_rf_is_dangerous", "rm -rf /", "prompt"),
    Case(D + "rm_f_is_dangerous", "rm -f /", "prompt"),
]

CASES = [*BASIC, *EXAMPLE, *LEGACY, *SAFE, *DANGEROUS]

_TYPED = (
    "Codex's typed-argument policy refused what it could not type ({what}); OpsGate matches "
    "`{program}` by its prefix and leaves its options to the program: `{program}` has no "
    "option that writes or runs anything, so the command can only read (or fail)"
)
LESS_STRICT: dict[str, str] = {
    "test_ls_dash_z: ls -z": _TYPED.format(what="an unknown option", program="ls"),
    "test_ls_dash_al: ls -al": _TYPED.format(what="bundled options", program="ls"),
    "test_head_no_args: head": _TYPED.format(what="no file: head reads stdin", program="head"),
    "test_head_invalid_n_as_0: head -n 0 src/extension.ts": _TYPED.format(
        what="a count that is not a positive integer", program="head"
    ),
    "test_head_invalid_n_as_nonint_float: head -n 1.5 src/extension.ts": _TYPED.format(
        what="a count that is not a positive integer", program="head"
    ),
    "test_head_invalid_n_as_float: head -n 1.0 src/extension.ts": _TYPED.format(
        what="a count that is not a positive integer", program="head"
    ),
    "test_head_invalid_n_as_negative_int: head -n -1 src/extension.ts": _TYPED.format(
        what="a negative count", program="head"
    ),
    "test_pwd_extra_args: pwd foo bar": _TYPED.format(what="extra arguments", program="pwd"),
}
"""Cases where OpsGate asks less than Codex, each with why that is safe to accept."""

FIXTURE_POLICY = Policy.load(FIXTURE)


def tier(case: Case) -> str:
    policy = FIXTURE_POLICY if case.policy is None else Policy.from_toml(case.policy)
    call = ToolCall(id="c", name="run_command", arguments=json.dumps({"command": case.command}))
    return policy.decide("run_command", call).tier


def test_the_case_ids_are_unique_and_the_exceptions_are_cases() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert set(LESS_STRICT) <= set(ids)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_opsgate_is_at_least_as_strict_as_codex(case: Case) -> None:
    got = tier(case)
    if case.id in LESS_STRICT:
        # The exception still holds (if it no longer does, remove it from LESS_STRICT).
        assert RANK[got] < RANK[case.codex], (case.id, got)
    else:
        assert RANK[got] >= RANK[case.codex], (case.id, got, case.codex)


@pytest.mark.parametrize(
    ("command", "decision"),
    [
        ("git -c core.pager=cat log -n 1", "always"),
        ("git checkout status", "always"),
        ("foo", "always"),
        ("git status", "never"),
        ("git reset --hard", "forbidden"),
        ("git -C /srv/app reset --hard", "forbidden"),
    ],
)
def test_the_fixture_gives_what_codex_gives_where_it_names_the_command(
    command: str, decision: str
) -> None:
    """Exact, not only at least as strict, where Codex's answer and ours should agree."""
    assert tier(Case("fixture", command, "allow")) == decision

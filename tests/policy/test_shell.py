"""Shell commands parsed as the policy judges them (`bot.policy._shell`), on the real grammar."""

from __future__ import annotations

import pytest

from bot.policy._shell import parse_command


def argvs(text: str) -> list[tuple[str, ...]]:
    return [p.argv for p in parse_command(text).parts]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("echo ok; rm -rf /srv/app/x", [("echo", "ok"), ("rm", "-rf", "/srv/app/x")]),
        ("a | b && c || (d; e)", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("echo a & echo b", [("echo", "a"), ("echo", "b")]),
        ("for i in 1 2; do rm x; done", [("rm", "x")]),
        ("case x in a) rm y;; esac", [("rm", "y")]),
        ("f() { rm -rf /; }; f", [("rm", "-rf", "/"), ("f",)]),
        ("! rm x", [("rm", "x")]),
        ("if test -f x; then rm x; fi", [("test", "-f", "x"), ("rm", "x")]),
    ],
)
def test_compound_commands_yield_every_simple_command(
    text: str, expected: list[tuple[str, ...]]
) -> None:
    parsed = parse_command(text)
    assert argvs(text) == expected
    assert parsed.compound and not parsed.plain


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("echo foo\\ bar 'a b' \"c d\"", ("echo", "foo bar", "a b", "c d")),
        ('k"ube"ctl get', ("kubectl", "get")),
        (
            "git --namespace status reset --hard HEAD~1",
            ("git", "--namespace", "status", "reset", "--hard", "HEAD~1"),
        ),
        ('echo "a \\"q\\" \\$x"', ("echo", 'a "q" $x')),
    ],
)
def test_words_are_unquoted_as_the_shell_would(text: str, argv: tuple[str, ...]) -> None:
    parsed = parse_command(text)
    assert argvs(text) == [argv]
    assert parsed.plain


def test_substitutions_are_seen_and_their_commands_judged() -> None:
    for text in (
        "echo $(rm -rf /)",
        "echo `rm -rf /`",
        'echo "a $(rm -rf /) b"',
        "cat <(rm -rf /)",
    ):
        parsed = parse_command(text)
        assert "substitution" in parsed.flags, text
        nested = [p for p in parsed.parts if p.nested]
        assert [p.argv for p in nested] == [("rm", "-rf", "/")], text
    assert "substitution" in parse_command("x=$(id)").flags


def test_sh_c_and_eval_are_flagged_and_what_they_run_is_parsed_again() -> None:
    for text, flag in (
        ('bash -c "rm -rf /"', "shell"),
        ("sh -ec 'rm -rf /'", "shell"),
        ('eval "rm -rf /"', "eval"),
    ):
        parsed = parse_command(text)
        assert flag in parsed.unjudgeable, text
        assert ("rm", "-rf", "/") in argvs(text), text
    assert "shell" in parse_command("curl -s https://example.test/x | bash").flags
    assert "eval" in parse_command("source ./env.sh").flags
    assert "eval" in parse_command("alias k=kubectl; k delete ns web").flags
    assert "eval" in parse_command("trap 'rm -rf /' EXIT").flags
    assert "wrapper" in parse_command("find . -name x -exec rm {} +").flags
    su = parse_command("su -c 'rm -rf /' root")
    assert "shell" in su.flags and ("rm", "-rf", "/") in [p.argv for p in su.parts]
    assert not parse_command("find . -name x").flags


def test_redirections_and_here_docs() -> None:
    heredoc = parse_command("cat <<EOF > out\nhello $(date)\nEOF\n")
    assert {"redirection", "writes_file", "substitution"} <= heredoc.flags
    assert ("date",) in argvs("cat <<EOF > out\nhello $(date)\nEOF\n")
    reads = parse_command("grep x < in.txt 2>&1 >/dev/null")
    assert reads.flags == {"redirection"}  # reading, fd duplication and /dev/null write nothing
    assert "writes_file" in parse_command("echo x >> /etc/cron.d/x").flags
    assert "writes_file" in parse_command("echo x &> log").flags
    # tree-sitter files `delete namespace prod` under the redirection: they are still argv.
    assert argvs("kubectl >/dev/null delete namespace prod") == [
        ("kubectl", "delete", "namespace", "prod")
    ]


@pytest.mark.parametrize(
    ("text", "argv", "wrappers"),
    [
        ("timeout 5 kubectl get pods", ("kubectl", "get", "pods"), ("timeout",)),
        (
            "sudo -u root timeout -s KILL 5 kubectl get pods",
            ("kubectl", "get", "pods"),
            ("sudo", "timeout"),
        ),
        ("nice -n 5 nohup ls", ("ls",), ("nice", "nohup")),
        ("env -i ls", ("ls",), ("env",)),
        ("/usr/bin/sudo ls", ("ls",), ("sudo",)),
    ],
)
def test_wrappers_whose_command_can_be_read_are_peeled(
    text: str, argv: tuple[str, ...], wrappers: tuple[str, ...]
) -> None:
    [part] = parse_command(text).parts
    assert (part.argv, part.wrappers) == (argv, wrappers)
    assert not part.unjudgeable


@pytest.mark.parametrize(
    "text",
    [
        "sudo -i",
        "sudo --shell",
        "env -S 'ls -l'",
        "xargs rm",
        "watch -n 1 ls",
        "timeout --bogus 5 ls",
        "timeout",
    ],
)
def test_wrappers_whose_command_cannot_be_judged_are_flagged(text: str) -> None:
    assert "wrapper" in parse_command(text).unjudgeable, text


def test_xargs_still_shows_the_command_it_runs() -> None:
    [part] = parse_command("xargs -0 rm -f").parts
    assert part.argv == ("rm", "-f") and "wrapper" in part.flags


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("rm $X", "expansion"),
        ("$CMD get pods", "expansion"),
        ("ls {a,b}", "expansion"),
        ("rm ~/x", "expansion"),
        ("echo $'a'", "expansion"),
        ("FOO=1 ls", "assignment"),
        ("PATH=/tmp; ls", "assignment"),
        ("export A=1", "assignment"),
        ("echo 'unterminated", "unparsable"),
        ("echo (", "unparsable"),
    ],
)
def test_what_cannot_be_judged_by_its_words_is_flagged(text: str, flag: str) -> None:
    assert flag in parse_command(text).unjudgeable


def test_an_unparsable_command_still_shows_the_parts_it_recovered() -> None:
    parsed = parse_command("kubectl delete namespace prod; '")
    assert "unparsable" in parsed.flags
    assert ("kubectl", "delete", "namespace", "prod") in [p.argv for p in parsed.parts]


def test_deep_nesting_stops_as_unparsable() -> None:
    text = "rm x"
    for _ in range(6):
        text = f"bash -c {text!r}" if "'" not in text else f'bash -c "{text}"'
    assert "unparsable" in parse_command(text).flags or "shell" in parse_command(text).flags
    assert "unparsable" in parse_command("echo a\x00b").flags


@pytest.mark.parametrize(
    ("text", "argv", "wrappers"),
    [
        ("env -- A=1 rm x", ("rm", "x"), ("env",)),
        ("sudo A=1 B=2 rm x", ("rm", "x"), ("sudo",)),
        ("env -i A=1 rm x", ("rm", "x"), ("env",)),
        ("chrt 10 rm x", ("rm", "x"), ("chrt",)),
        ("chrt -r 10 rm x", ("rm", "x"), ("chrt",)),
        ("taskset 0x3 rm x", ("rm", "x"), ("taskset",)),
        ("taskset -c 0,1 rm x", ("rm", "x"), ("taskset",)),
        ("flock -n /tmp/l rm x", ("rm", "x"), ("flock",)),
        ("chroot /newroot rm x", ("rm", "x"), ("chroot",)),
        ("chroot --userspec=a:b /newroot rm x", ("rm", "x"), ("chroot",)),
        ("ionice -c3 -t rm x", ("rm", "x"), ("ionice",)),
        ("setsid -w rm x", ("rm", "x"), ("setsid",)),
        ("nsenter -t 1 -m -u rm x", ("rm", "x"), ("nsenter",)),
        ("unshare --mount-proc -f rm x", ("rm", "x"), ("unshare",)),
        ("systemd-run -p MemoryMax=1G --wait rm x", ("rm", "x"), ("systemd-run",)),
        ("doas -u root -- rm x", ("rm", "x"), ("doas",)),
        ("valgrind --leak-check=full rm x", ("rm", "x"), ("valgrind",)),
        ("busybox rm x", ("rm", "x"), ("busybox",)),
        ("runuser -u ops -- rm x", ("rm", "x"), ("runuser",)),
        ("nice -5 rm x", ("rm", "x"), ("nice",)),
    ],
)
def test_the_wrapper_table_peels_options_positionals_and_assignments(
    text: str, argv: tuple[str, ...], wrappers: tuple[str, ...]
) -> None:
    [part] = parse_command(text).parts
    assert (part.argv, part.wrappers) == (argv, wrappers)
    assignment = "A=1" in text
    assert ("assignment" in part.flags) is assignment


@pytest.mark.parametrize(
    "text",
    [
        "setsid --bogus rm x",
        "chrt -p 10 1234",
        "taskset -p 0x3 1234",
        "ionice -p 1234",
        "nice A=1 rm x",
        "sudo -s",
        "sudo --us=root rm x",
        "su root",
        "runuser ops",
        "script out.txt",
        "flock",
        "timeout -k",
    ],
)
def test_an_unknown_option_or_form_leaves_the_wrapper_unreadable(text: str) -> None:
    assert "wrapper" in parse_command(text).unjudgeable, text


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("flock /tmp/l -c 'rm x'", ("rm", "x")),
        ("script -q -c 'rm x' /dev/null", ("rm", "x")),
        ("sg wheel -c 'rm x'", ("rm", "x")),
        ("runuser ops -c 'rm x'", ("rm", "x")),
        ("busybox sh -c 'rm x'", ("rm", "x")),
    ],
)
def test_a_wrapper_that_runs_a_script_is_a_shell(text: str, script: tuple[str, ...]) -> None:
    parsed = parse_command(text)
    assert "shell" in parsed.unjudgeable
    assert script in [p.argv for p in parsed.parts if p.nested]


@pytest.mark.parametrize(
    ("text", "writes"),
    [
        ("> /etc/motd", ("/etc/motd",)),
        ("echo x >> a 2> b", ("a", "b")),
        ("ls >| a &> b &>> c", ("a", "b", "c")),
        ("ls >&a", ("a",)),
        ("ls > $HOME/x", ("$HOME/x",)),
        ("strace -o trace.txt ls", ("trace.txt",)),
        ("strace -fo trace.txt ls", ("trace.txt",)),
        ("time --output=t ls", ("t",)),
        ("script -c ls log.txt", ("log.txt",)),
        ("ls >/dev/null 2>&1 2>&- >/dev/stderr", ()),
        ("script -q -c ls /dev/null", ()),
    ],
)
def test_the_files_a_command_writes_are_exposed(text: str, writes: tuple[str, ...]) -> None:
    [part] = [p for p in parse_command(text).parts if not p.nested]
    assert part.writes == writes
    assert ("writes_file" in part.unjudgeable) is bool(writes)


def test_a_bare_redirection_is_a_command_and_a_non_literal_target_is_unjudgeable() -> None:
    [part] = parse_command("> /etc/motd").parts
    assert part.argv == () and part.program == ""
    assert "expansion" in parse_command("ls > $HOME/x").unjudgeable
    assert "expansion" in parse_command("ls > *.txt").unjudgeable


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("/usr/bin/r[m] x", "program"),
        ("r? x", "program"),
        ("$CMD x", "program"),
        ("timeout 5* ls", "program"),
        ("sudo r* x", "program"),
        ("r\\\nm x", "ambiguous"),
        ("ls x\\\n#;rm y", "ambiguous"),
        ("ls;; rm x", "ambiguous"),
        ("ls\rrm x", "ambiguous"),
        ("cat <<EOF\nE\\\nOF\nrm y\nEOF\n", "ambiguous"),
        ("ls ;& rm x", "unparsable"),
        ("hash -p /bin/rm ls", "evaluates"),
        ("coproc rm x", "evaluates"),
        ("[[ -v 'a[$(id)]' ]]", "evaluates"),
        ("[[ $x -gt 1 ]]", "evaluates"),
        ("test -v 'a[$(id)]'", "evaluates"),
        ("[ -v 'a[$(id)]' ]", "evaluates"),
        ("printf -v 'a[$(id)]' x", "evaluates"),
        ("read 'a[$(id)]'", "evaluates"),
        ("mapfile -t a", "evaluates"),
        ("let 'a[$(id)]=1'", "evaluates"),
        ("(( a[$x] ))", "evaluates"),
        ("echo $(( a[1] ))", "evaluates"),
        ("echo ${x@P}", "evaluates"),
        ("echo ${!x}", "evaluates"),
        ("echo ${a[1]}", "evaluates"),
        ("enable -f x.so y", "evaluates"),
        ("shopt -s extglob", "evaluates"),
        ("shift 'a[$(id)]'", "evaluates"),
        ("set -o vi", "evaluates"),
        ("cat <<EOF\n${x@P}\nEOF\n", "evaluates"),
        ("cat <<EOF\n`id\nEOF\n", "unparsable"),
        ("for i in ${HOME:'a[$(id)]'}; do ls; done", "expansion"),
        ("cat <<< ${HOME:'a[$(id)]'}", "expansion"),
        ("case ${HOME:'a[$(id)]'} in *) ls;; esac", "unparsable"),
        ("cat <<EOF\n${HOME:a[\\`id\\`]}\nEOF\n", "unparsable"),
        ("cat <<EOF\n${HOME:1}\nEOF\n", "expansion"),
        ("for i in 1; do echo $((i)); done", "evaluates"),
    ],
)
def test_text_the_shell_may_read_otherwise_is_unjudgeable(text: str, flag: str) -> None:
    assert flag in parse_command(text).unjudgeable, text


@pytest.mark.parametrize(
    "text",
    [
        "ls -la /tmp",
        "kubectl get pods \\\n  -n web",
        'echo "a \\\nb"',
        "set -euo pipefail",
        "set -e",
        "shift 2",
        "[ -f x ]",
        "[[ -f x && $y == z ]]",
        "cat <<'EOF'\n`rm x` $(rm x) ${x@P}\nEOF\n",
        "cat <<EOF\n$HOME ${HOME}\nEOF\n",
        "for f in a b; do ls; done",
        "case x in a) ls;; b) ls;; esac",
    ],
)
def test_what_is_understood_is_not_flagged(text: str) -> None:
    assert not parse_command(text).unjudgeable, text


def test_the_other_reading_of_a_continuation_is_judged_too() -> None:
    assert ("rm", "x") in argvs("r\\\nm x")
    assert ("rm", "y") in argvs("ls x\\\n#;rm y")
    assert argvs('echo "a \\\nb"') == [("echo", "a b")]


def test_unquoted_here_documents_run_their_backquotes() -> None:
    parsed = parse_command("cat <<EOF\nx `rm \\`id\\`` \\`not\\`\nEOF\n")
    nested = [p.argv for p in parsed.parts if p.nested]
    assert ("rm", "`id`") in nested or ("rm",) in nested
    assert ("id",) in nested and ("not",) not in nested
    assert "substitution" in parsed.unjudgeable


def test_a_glob_argument_is_noted_and_keeps_the_command_from_an_allowance() -> None:
    parsed = parse_command("ls *.log")
    assert parsed.flags == {"glob"} and not parsed.unjudgeable and not parsed.plain
    assert parse_command("ls '*.log'").plain


def test_find_exec_and_watch_show_the_commands_they_run() -> None:
    find = parse_command("find . -name x -exec rm -f {} \\; -print -execdir sudo ls {} +")
    assert [p.argv for p in find.parts if p.nested] == [("rm", "-f", "{}"), ("ls", "{}")]
    assert "wrapper" in find.unjudgeable
    watch = parse_command("watch -n 1 'ls; rm x'")
    assert "shell" in watch.unjudgeable and ("rm", "x") in [p.argv for p in watch.parts]
    [direct] = parse_command("watch -x rm x").parts
    assert direct.argv == ("rm", "x") and "wrapper" in direct.flags


def test_a_shell_fed_a_here_document_runs_its_body() -> None:
    for text in ("bash <<EOF\nrm x\nEOF\n", "sh -s <<'EOF'\nrm x\nEOF\n", "bash <<< 'rm x'"):
        parsed = parse_command(text)
        assert "shell" in parsed.unjudgeable and ("rm", "x") in argvs(text), text


def test_nesting_deeper_than_the_walk_follows_is_unparsable() -> None:
    parsed = parse_command("(" * 3000 + "ls" + ")" * 3000)
    assert parsed.unjudgeable == {"unparsable"} and not parsed.plain


def test_a_tab_stripped_here_document_is_expanded_too() -> None:
    parsed = parse_command("cat <<-EOF\n\t$(rm x) `rm y`\n\tEOF\n")
    assert [p.argv for p in parsed.parts if p.nested] == [("rm", "x"), ("rm", "y")]
    assert not [p for p in parse_command("cat <<-'EOF'\n\t$(rm x)\n\tEOF\n").parts if p.nested]


@pytest.mark.parametrize(
    ("text", "argv"),
    [
        ("script -qc 'rm x' /dev/null", ("rm", "x")),
        ("nice -n5 rm x", ("rm", "x")),
        ("xargs -0n1 rm", ("rm",)),
        ("sudo -Eu ops rm x", ("rm", "x")),
        ("sudo -nEuops rm x", ("rm", "x")),
    ],
)
def test_short_options_cluster_as_getopt_reads_them(text: str, argv: tuple[str, ...]) -> None:
    assert argv in argvs(text)
    assert "wrapper" not in parse_command("sudo -Eu ops rm x").flags
    assert "wrapper" in parse_command("sudo -Es rm x").flags  # -s: a shell, unreadable


@pytest.mark.parametrize(
    "text",
    ["ls <<EOF && rm y\nhi\nEOF\n", "ls <<EOF | rm y\nhi\nEOF\n", "ls <<EOF || rm y\nhi\nEOF\n"],
)
def test_what_follows_a_here_document_on_its_line_is_a_command(text: str) -> None:
    parsed = parse_command(text)
    assert ("rm", "y") in argvs(text) and parsed.compound and not parsed.plain


def test_the_words_that_are_file_name_patterns_are_exposed() -> None:
    [part] = parse_command("sudo kubectl delete n[s] 'w*' web*").parts
    assert part.argv[part.patterns[0]] == "n[s]"
    assert part.patterns == (2, 4) and "glob" in part.flags
    assert parse_command("kubectl delete ns web").parts[0].patterns == ()


def test_the_assignments_a_command_runs_with_are_exposed() -> None:
    [part] = parse_command("K='/a b' C=$x sudo -E env -- A='1 2' kubectl get pods").parts
    assert part.argv == ("kubectl", "get", "pods")
    assert part.assignments == ("K=/a b", "C=$x", "A=1 2")
    assert "assignment" in part.unjudgeable

"""The command-aware policy fails closed: a call runs without a card only when every simple
command in it is understood, and a forbidden command is refused however it is wrapped or
hidden. Judged end to end through `Policy.decide` under a policy with `rm` forbidden and `ls`
(and a few other readers) free; the last two tests hold what was refused by simpler means."""

from __future__ import annotations

import json

import pytest

from agent_core import ToolCall
from bot.policy import GateDecision, Policy

POLICY = Policy.from_toml(
    '[tools.run_command]\napproval = "rules"\n'
    '[[tools.run_command.rules]]\nprefix = ["rm"]\napproval = "forbidden"\n'
    + "".join(
        f'[[tools.run_command.rules]]\nprefix = ["{program}"]\napproval = "never"\n'
        for program in ("ls", "cat", "echo", "kubectl", "grep", "true")
    )
)


def verdict(command: str) -> GateDecision:
    call = ToolCall(id="c", name="run_command", arguments=json.dumps({"command": command}))
    return POLICY.decide("run_command", call)


@pytest.mark.parametrize(
    "command",
    [
        "ls -la /tmp",
        "kubectl get pods -n x",
        "ls /tmp | grep x | cat",
        "echo 'a b' \"c d\" && ls",
        "kubectl get pods \\\n  -n web",
        "echo hi >/dev/null 2>&1",
        "cat <<'EOF'\n$(rm x) `rm y`\nEOF\n",
        "cat <<EOF\nhello $HOME\nEOF\n",
        "case x in a) ls;; esac",
        "ls *.log",
        "[ -f x ] && ls",
    ],
)
def test_what_is_understood_still_runs_freely(command: str) -> None:
    decision = verdict(command)
    assert not decision.requires_approval, (command, decision.rule)


@pytest.mark.parametrize(
    "command",
    [
        "/usr/bin/r[m] x",
        "/usr/bin/r? x",
        "/usr/bin/r* x",
        "timeout 5* ls",
        "r\\\nm x",
        "ls x\\\n#;rm y",
        "ls;; rm x",
        "> /etc/motd",
        "env -- A=1 ls",
        "sudo A=1 ls",
        "hash -p /bin/rm ls; ls x",
        "coproc ls",
        "[[ -v 'a[$(ls)]' ]]",
        "[[ 'a[$(ls)]' -eq 1 ]]",
        "printf -v 'a[$(ls)]' x",
        "read 'a[$(ls)]' < /dev/null",
        "mapfile a < /dev/null",
        "let x=1",
        "(( a[1]++ ))",
        "enable -f /tmp/x.so ls",
        "shopt -s extglob",
        "nsenter -t 1 -m ls",
        "chroot /newroot ls",
        "strace -o /etc/motd ls",
        "script -c ls /dev/null",
        "setsid --bogus ls",
    ],
)
def test_what_was_not_understood_now_needs_a_card(command: str) -> None:
    decision = verdict(command)
    assert decision.requires_approval, (command, decision.rule)
    assert decision.command is not None and decision.command.unjudgeable, command
    assert not decision.command.plain


@pytest.mark.parametrize(
    "command",
    [
        "cat <<EOF\n`rm x`\nEOF\n",
        "cat <<-EOF\n\t$(rm x)\n\tEOF\n",
        "ls <<EOF && rm x\nhi\nEOF\n",
        "r\\\nm x",
        "ls x\\\n#;rm y",
        "env -- A=1 rm x",
        "sudo A=1 rm x",
        "env A=1 rm x",
        "coproc rm x",
        "setsid rm x",
        "setsid -f rm x",
        "ionice -c 3 rm x",
        "ionice -c3 -n7 rm x",
        "chrt 10 rm x",
        "chrt -f 10 rm x",
        "taskset 0x3 rm x",
        "taskset -c 0,1 rm x",
        "flock /tmp/l rm x",
        "flock -w 5 /tmp/l rm x",
        "flock /tmp/l -c 'rm x'",
        "doas rm x",
        "doas -u root rm x",
        "nsenter -t 1 -m rm x",
        "unshare -m rm x",
        "chroot /newroot rm x",
        "strace -f rm x",
        "systemd-run --unit x rm x",
        "script -c 'rm x' /dev/null",
        "find . -exec rm x {} +",
        "bash <<EOF\nrm x\nEOF\n",
        "watch -n 1 'ls; rm x'",
        "su -c 'rm x' root",
        "runuser -u ops -- rm x",
        "busybox rm x",
        "ltrace rm x",
        "valgrind --tool=memcheck rm x",
        "firejail --private rm x",
        "caffeinate -i rm x",
        "proxychains4 -q rm x",
        "torsocks rm x",
        "numactl --cpunodebind=0 rm x",
        "cgexec -g cpu:grp rm x",
        "sg wheel -c 'rm x'",
        "pkexec rm x",
        "sudo env A=1 nice -n 1 setsid rm x",
        "/usr/bin/setsid rm x",
    ],
)
def test_a_forbidden_command_is_forbidden_however_it_is_wrapped(command: str) -> None:
    decision = verdict(command)
    assert decision.forbidden, (command, decision.rule)
    assert "rm" in [p.argv[0] for p in decision.parts if p.argv], command


def why(command: str) -> str:
    decision = verdict(command)
    return " ".join([decision.rule, *(p.why for p in decision.parts)])


def test_the_card_says_why_a_part_was_not_understood() -> None:
    assert "program" in why("/usr/bin/l[s] x")
    assert "writes to a file" in why("> /etc/motd")
    assert "bash" in why("shopt -s extglob")
    assert "line continuation" in why("ls x\\\n#;ls y")


@pytest.mark.parametrize(
    "command",
    [
        "$(echo rm) x",
        "ls x; '",
        "ls > /etc/motd",
        "ls >> out",
        "ls >| out",
        "ls &> out",
        "ls &>> out",
        "ls 1<> out",
        "ls >&out",
        "ls > $HOME/out",
        "{ ls; } > out",
        "env A=1 ls",
        "echo $(( a[1] ))",
        "echo ${x@P}",
        "for ((i=0; i<1; i++)); do ls; done",
        "su -c ls root",
    ],
)
def test_what_already_needed_a_card_still_does(command: str) -> None:
    test_what_was_not_understood_now_needs_a_card(command)


@pytest.mark.parametrize(
    "command",
    [
        "cat <<EOF\n$(rm x)\nEOF\n",
        "cat <<EOF\nx \\$y `echo $(rm x)`\nEOF\n",
        "nice -n 5 rm x",
        "nohup rm x",
        "stdbuf -oL rm x",
        "timeout 5 rm x",
        "time rm x",
        "command rm x",
        "builtin exec rm x",
        "exec rm x",
        "sudo -u ops rm x",
        "xargs rm x",
        "watch rm x",
    ],
)
def test_what_was_already_forbidden_stays_so(command: str) -> None:
    test_a_forbidden_command_is_forbidden_however_it_is_wrapped(command)


GLOBS = Policy.from_toml(
    '[tools.run_command]\napproval = "rules"\ndefault = "never"\n'
    '[[tools.run_command.rules]]\nprefix = ["rm"]\napproval = "forbidden"\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete", "ns"]\napproval = "forbidden"\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "scale"]\nrequired_approvals = 2\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\napproval = "never"\n'
)


def _globbed(command: str) -> GateDecision:
    call = ToolCall(id="c", name="run_command", arguments=json.dumps({"command": command}))
    return GLOBS.decide("run_command", call)


@pytest.mark.parametrize(
    "command",
    [
        "/usr/bin/r[m] x",
        "r* -rf /",
        "/usr/*/rm x",
        "$'rm' x",
        "$'\\x72m' -rf /",
        "$'\\162'm x",
        "/bin/$'rm' x",
        "kubectl delete n[s] web",
        "kubectl delete n* web",
        "kubectl -n x del?te ns web",
        "kubectl $'delete' ns web",
    ],
)
def test_a_pattern_or_quoted_word_that_could_be_a_forbidden_rules_is_forbidden(
    command: str,
) -> None:
    """The shell makes the pattern a file name, or decodes the quoted word, before it runs:
    what runs could be (or is) the forbidden command, so the rule applies."""
    decision = _globbed(command)
    assert decision.forbidden, (command, decision.rule)


def test_a_pattern_that_could_be_an_asking_rules_verb_gets_that_rules_card() -> None:
    decision = _globbed("kubectl sc?le deploy/web --replicas=0")
    assert decision.requires_approval and not decision.forbidden
    assert decision.policy_rule == "tools.run_command.rules[2]"
    assert decision.required_approvals == 2


@pytest.mark.parametrize("command", ["/usr/bin/l[s] x", "$X x", "x* y"])
def test_a_pattern_no_asking_rule_could_be_still_needs_a_card(command: str) -> None:
    """A free rule is never matched by a pattern; an expansion names no word: a card."""
    decision = _globbed(command)
    assert decision.requires_approval and not decision.forbidden, (command, decision.rule)

"""Command-aware policy rules: tiers, the verdict order, per-rule approvers, checked examples."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_core import ToolCall
from bot.policy import GateDecision, Policy, PolicyError
from bot.policy._programs import PROGRAMS, layout

KUBECTL = Path(__file__).parents[1] / "fixtures" / "policies" / "kubectl.toml"


@pytest.fixture
def kubectl() -> Policy:
    return Policy.load(KUBECTL)


def verdict(policy: Policy, command: str, tool: str = "run_command") -> GateDecision:
    arguments: dict[str, Any] = {"command": command} if tool == "run_command" else {}
    return policy.decide(tool, ToolCall(id="c1", name=tool, arguments=json.dumps(arguments)))


def rules(body: str, approval: str = "rules", default: str | None = None) -> Policy:
    said = f'default = "{default}"\n' if default else ""
    return Policy.from_toml(f'[tools.run_command]\napproval = "{approval}"\n{said}{body}')


ECHO_FREE = '[[tools.run_command.rules]]\nprefix = ["echo"]\napproval = "never"\n'
RM = '[[tools.run_command.rules]]\nprefix = ["rm"]\n'


@pytest.mark.parametrize(
    ("command", "tier", "rule"),
    [
        ("kubectl get pods -n web", "never", "tools.run_command.rules[0]"),
        ("kubectl delete pod web-1", "always", "tools.run_command.rules[1]"),
        ("kubectl delete namespace web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("/usr/local/bin/kubectl delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("timeout 30 kubectl delete pod web-1", "always", "tools.run_command.rules[1]"),
        ("sudo -u ops kubectl delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl get pods; kubectl delete pod x", "always", "tools.run_command.rules[1]"),
        ("kubectl delete pod x && kubectl delete ns y", "forbidden", "tools.run_command.rules[2]"),
        ("echo $(kubectl delete ns web)", "forbidden", "tools.run_command.rules[2]"),
        ("bash -c 'kubectl delete ns web'", "forbidden", "tools.run_command.rules[2]"),
        ("ls -la", "always", None),
        ("echo ok", "never", "tools.run_command.rules[5]"),
    ],
)
def test_the_strictest_part_decides(
    kubectl: Policy, command: str, tier: str, rule: str | None
) -> None:
    decision = verdict(kubectl, command)
    assert (decision.tier, decision.policy_rule) == (tier, rule)
    assert decision.requires_approval is (tier != "never")


def test_compound_command_is_judged_by_its_rm_part() -> None:
    policy = rules(ECHO_FREE + RM)
    assert verdict(policy, "echo ok").requires_approval is False
    decision = verdict(policy, "echo ok; rm -rf /srv/app/x")
    assert decision.requires_approval and decision.policy_rule == "tools.run_command.rules[1]"
    assert [(p.argv[0], p.tier) for p in decision.parts] == [("echo", "never"), ("rm", "always")]


@pytest.mark.parametrize(
    "command",
    [
        'bash -c "echo hi"',
        "echo $(id)",
        "echo `id`",
        'eval "echo hi"',
        "xargs echo",
        "env A=1 echo hi",
        "echo 'unterminated",
        "echo hi > /etc/motd",
        "X=1 echo hi",
    ],
)
def test_what_cannot_be_judged_needs_approval_even_under_a_never_rule(command: str) -> None:
    decision = verdict(rules(ECHO_FREE, default="never"), command)
    assert decision.requires_approval and not decision.forbidden, command
    assert decision.policy_rule is None and "approval required" in decision.rule


def test_a_tool_set_to_never_never_asks_and_forbidden_never_runs() -> None:
    assert verdict(rules("", approval="never"), 'bash -c "rm -rf /"').requires_approval is False
    forbidden = verdict(rules("", approval="forbidden"), "ls")
    assert forbidden.forbidden and forbidden.rule == "tools.run_command: approval = forbidden"


def test_a_command_no_rule_matches_takes_the_default_which_asks() -> None:
    decision = verdict(rules(RM), "df -h /var")
    assert decision.requires_approval and decision.policy_rule is None
    assert decision.rule == (
        "tools.run_command: no rule names the program 'df': the tool's default = \"always\""
    )
    [part] = decision.parts
    assert (part.tier, part.policy_rule) == ("always", None)
    assert verdict(rules(RM, default="always"), "df -h /var").requires_approval


def test_default_never_restores_free_running_for_unmatched_commands() -> None:
    decision = verdict(rules(RM, default="never"), "df -h /var")
    assert decision.requires_approval is False
    assert decision.rule == "tools.run_command: no rule matched"
    assert verdict(rules(RM, default="never"), "rm x").requires_approval


def test_the_rule_with_most_approvals_beats_always_and_its_terms_apply(kubectl: Policy) -> None:
    policy = rules(
        RM
        + '[[tools.run_command.rules]]\nprefix = ["rm", "-rf"]\nrequired_approvals = 3\n'
        + 'approvers = ["S0SRE"]\nttl = "5m"\njustification = "Recursive."\n'
    )
    decision = verdict(policy, "rm -rf /srv/x")
    assert decision.policy_rule == "tools.run_command.rules[1]"
    assert (decision.required_approvals, decision.ttl) == (3, timedelta(minutes=5))
    assert decision.justification == "Recursive."
    spec = policy.approvers_for("C0OPS", decision)
    assert (spec.groups, spec.source) == (("S0SRE",), "tools.run_command.rules[1].approvers")
    assert policy.required_approvals_for("C0OPS", decision) == 3
    assert policy.ttl_for(decision) == timedelta(minutes=5)
    # Without a rule of its own, the channel's (here the defaults') terms apply.
    plain = verdict(policy, "rm /srv/x")
    assert policy.approvers_for("C0OPS", plain).source == "defaults.approvers"
    assert policy.required_approvals_for("C0OPS", plain) == 1


def test_a_pattern_matches_the_rest_of_the_words() -> None:
    policy = rules(
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete"]\npattern = "--all"\n'
        'approval = "forbidden"\n'
    )
    assert verdict(policy, "kubectl delete pods --all").forbidden
    assert verdict(policy, "kubectl delete pod web").tier == "always"  # the default
    assert verdict(policy, "kubectl get pods --all").tier == "always"


def test_argument_rules_take_the_same_keys_for_other_tools() -> None:
    policy = Policy.from_toml(
        '[tools.http_request]\napproval = "rules"\n'
        '[[tools.http_request.rules]]\nargument = "method"\npattern = "^DELETE$"\n'
        'approval = "forbidden"\njustification = "No deletes over HTTP."\n'
        'examples = [{method = "DELETE"}]\nnot_examples = [{method = "GET"}]\n'
        '[[tools.http_request.rules]]\nargument = "method"\npattern = "^(POST|PUT)$"\n'
        'approvers = ["U0BOB"]\n'
    )
    call = ToolCall(id="c", name="http_request", arguments='{"method": "DELETE"}')
    assert policy.decide("http_request", call).justification == "No deletes over HTTP."
    put = ToolCall(id="c", name="http_request", arguments='{"method": "PUT"}')
    decision = policy.decide("http_request", put)
    assert decision.policy_rule == "tools.http_request.rules[1]"
    assert policy.approvers_for(None, decision).users == ("U0BOB",)


def test_old_argument_rules_of_run_command_keep_working() -> None:
    policy = rules(
        '[[tools.run_command.rules]]\nargument = "command"\npattern = "^rm"\n', default="never"
    )
    assert verdict(policy, "rm x").policy_rule == "tools.run_command.rules[0]"
    assert not verdict(policy, "ls").requires_approval


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\n'
            'examples = ["kubectl describe pod x"]\n',
            "tools.run_command.rules[0]: example 'kubectl describe pod x' does not match",
        ),
        (
            RM + '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\n'
            'not_examples = ["ls; kubectl get pods"]\n',
            "tools.run_command.rules[1]: not_example 'ls; kubectl get pods' matches this rule",
        ),
        (
            '[[tools.run_command.rules]]\nprefix = ["ls"]\napproval = "never"\n'
            'approvers = ["U0BOB"]\n',
            "tools.run_command.rules[0]: approvers apply only to calls that wait for approval",
        ),
        (
            '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\n'
            'allow_prefix = ["kubectl"]\n',
            "tools.run_command.rules[0]: allow_prefix must start with the rule's prefix",
        ),
        (
            '[[tools.run_command.rules]]\nprefix = ["ls"]\napprovers = ["U0BOB"]\n'
            "required_approvals = 2\n",
            "required_approvals = 2 but approvers lists only 1 person(s)",
        ),
        (
            '[[tools.run_command.rules]]\nprefix = ["ls"]\naproval = "never"\n',
            "unknown key 'tools.run_command.rules[0].aproval' (did you mean 'approval'?)",
        ),
        (
            '[[tools.run_command.rules]]\nprefix = ["ls"]\napproval = "sometimes"\n',
            "tools.run_command.rules[0].approval",
        ),
        (
            "[[tools.run_command.rules]]\nprefix = []\n",
            "tools.run_command.rules[0].prefix",
        ),
    ],
)
def test_a_rule_that_is_wrong_stops_loading_naming_it(body: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        rules(body)
    assert message in str(caught.value)


def test_prefix_rules_are_for_run_command_only() -> None:
    with pytest.raises(PolicyError, match=r"tools\.http_request\.rules\[0\]: `prefix`"):
        Policy.from_toml(
            '[tools.http_request]\napproval = "rules"\n'
            '[[tools.http_request.rules]]\nprefix = ["GET"]\n'
        )


def test_help_says_the_rules_in_plain_words(kubectl: Policy) -> None:
    assert kubectl.approval_summary("run_command") == (
        "asks for approval for kubectl delete … (2 approvals); kubectl rollout restart …; "
        "kubectl apply … (preview: kubectl diff -f {arg:-f|--filename}); "
        "commands it cannot judge (substitution, eval, sh -c, wrappers); "
        "never runs kubectl delete namespace; runs freely kubectl get …; echo …; "
        'any other command asks for approval (default = "always")'
    )
    assert Policy.default().approval_summary("http_request") == (
        "asks for approval for methods other than GET and HEAD"
    )


# --- a rule's verb after the program's options; what writes or runs something -----------------


@pytest.mark.parametrize(
    ("command", "tier", "rule"),
    [
        ("kubectl -n web delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl --namespace=web delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl -nweb --context prod delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl --context prod -n web delete pod x", "always", "tools.run_command.rules[1]"),
        ("kubectl -n web get pods", "never", "tools.run_command.rules[0]"),
        # An option the table does not know: the verb's place is unknown, and a rule that
        # forbids and could match at a later word still applies; a free one does not.
        ("kubectl --bogus web delete ns web", "forbidden", "tools.run_command.rules[2]"),
        ("kubectl --bogus get pods", "always", None),
        # `--kubeconfig` can run a program (exec credentials): a free rule does not cover it.
        ("kubectl --kubeconfig /tmp/k get pods", "always", None),
        ("kubectl -n web logs web-1", "always", None),  # no rule: the default
    ],
)
def test_the_verb_is_found_after_the_programs_options(
    kubectl: Policy, command: str, tier: str, rule: str | None
) -> None:
    decision = verdict(kubectl, command)
    assert (decision.tier, decision.policy_rule) == (tier, rule)


@pytest.mark.parametrize(
    ("prefix", "command"),
    [
        ('["git", "reset"]', "git -C /srv/app reset --hard"),
        ('["git", "reset"]', "git --git-dir=/srv/app/.git reset --hard"),
        ('["git", "log"]', "git -c k=v log"),
        ('["git", "push"]', "git --no-pager -c a=b push --force"),
        ('["docker", "rm"]', "docker --context x rm web"),
        ('["helm", "uninstall"]', "helm -n x uninstall web"),
        ('["systemctl", "stop"]', "systemctl --user stop web"),
        ('["terraform", "destroy"]', "terraform -chdir=infra destroy"),
        ('["aws", "s3", "rm"]', "aws --profile p --region eu-west-1 s3 rm s3://b/k"),
        ('["gcloud", "compute"]', "gcloud --project p compute instances delete x"),
        ('["kubectl", "delete"]', "sudo -u ops /usr/bin/kubectl -n web delete pod x"),
    ],
)
def test_a_forbidden_verb_is_not_dodged_by_options_before_it(prefix: str, command: str) -> None:
    policy = rules(f'[[tools.run_command.rules]]\nprefix = {prefix}\napproval = "forbidden"\n')
    assert verdict(policy, command).policy_rule == "tools.run_command.rules[0]", command
    assert verdict(policy, command).forbidden


def test_a_prefix_whose_second_word_is_an_option_matches_the_words_as_written() -> None:
    policy = rules('[[tools.run_command.rules]]\nprefix = ["rm", "-rf"]\napproval = "forbidden"\n')
    assert verdict(policy, "rm -rf /srv/x").forbidden
    assert not verdict(policy, "rm -r -f /srv/x").forbidden  # the default asks
    assert verdict(policy, "rm -r -f /srv/x").requires_approval


def test_a_pattern_sees_the_options_before_the_verb_too() -> None:
    policy = rules(
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "delete"]\npattern = "kube-system"\n'
        'approval = "forbidden"\n'
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "get"]\npattern = "^(?!.*secret)"\n'
        'approval = "never"\n'
    )
    assert verdict(policy, "kubectl -n kube-system delete pod x").forbidden
    assert verdict(policy, "kubectl delete pod x -n kube-system").forbidden
    assert not verdict(policy, "kubectl -n web get pods").requires_approval
    # A free rule must hold on both readings: here the context's name holds "secret".
    assert verdict(policy, "kubectl --context secret-prod get pods").requires_approval


GIT_READS = (
    '[[tools.run_command.rules]]\nprefix = ["git", "log"]\napproval = "never"\n'
    '[[tools.run_command.rules]]\nprefix = ["git", "status"]\napproval = "never"\n'
    '[[tools.run_command.rules]]\nprefix = ["git", "diff"]\napproval = "never"\n'
)


@pytest.mark.parametrize(
    "command",
    [
        "git -c core.pager=cat log",
        "git -ccore.pager=cat status",
        "git --config-env=core.pager=PAGER log",
        "git -p log",
        "git --exec-path=/tmp/x status",
        "git -C /tmp/elsewhere status",
        "git log --output=/tmp/x",
        "git diff --output /tmp/x",
        "git diff --ext-diff",
    ],
)
def test_a_git_read_rule_does_not_cover_what_writes_or_runs_something(command: str) -> None:
    decision = verdict(rules(GIT_READS, default="never"), command)
    assert decision.requires_approval and not decision.forbidden, command
    assert decision.policy_rule is None


@pytest.mark.parametrize(
    ("program", "command"),
    [
        ("curl", "curl -o /etc/motd https://example.com"),
        ("curl", "curl -sSLo /etc/motd https://example.com"),
        ("curl", "curl --output=/etc/motd https://example.com"),
        ("sort", "sort -o /etc/passwd x"),
        ("sed", "sed -i s/a/b/ /etc/hosts"),
        ("ssh", "ssh -o ProxyCommand=id web-1 uptime"),
        ("ssh", "ssh -oProxyCommand=id web-1"),
        ("find", "find / -delete"),
        ("rg", "rg --pre ./x pattern"),
        ("wget", "wget -O /etc/motd https://example.com"),
    ],
)
def test_an_option_that_writes_or_runs_keeps_a_free_rule_off(program: str, command: str) -> None:
    policy = rules(
        f'[[tools.run_command.rules]]\nprefix = ["{program}"]\napproval = "never"\n',
        default="never",
    )
    decision = verdict(policy, command)
    assert decision.requires_approval and decision.policy_rule is None, command
    [part] = decision.parts
    assert "approval required (tools.run_command.rules[0] alone would not ask)" in part.why


@pytest.mark.parametrize(
    ("program", "command"),
    [
        ("git", "git log -p -1"),
        ("git", "git --no-pager log"),
        ("curl", "curl -sS https://example.com"),
        ("kubectl", "kubectl get pods -o json"),
        ("sort", "sort -rn x"),
        ("ssh", "ssh -i key -p 2222 web-1 uptime"),
    ],
)
def test_options_that_only_read_leave_a_free_rule_in_force(program: str, command: str) -> None:
    policy = rules(f'[[tools.run_command.rules]]\nprefix = ["{program}"]\napproval = "never"\n')
    assert not verdict(policy, command).requires_approval, command


def test_git_checkout_status_is_not_git_status() -> None:
    """The verb is the first word after git's options: `status` here may be a branch."""
    decision = verdict(rules(GIT_READS), "git checkout status")
    assert (decision.tier, decision.policy_rule) == ("always", None)
    assert verdict(rules(GIT_READS), "git --no-pager status").tier == "never"


def test_an_unknown_program_takes_the_default_never_a_neighbours_rule() -> None:
    policy = rules(
        ECHO_FREE + '[[tools.run_command.rules]]\nprefix = ["rm"]\napproval = "forbidden"\n'
    )
    decision = verdict(policy, "echo ok; frobnicate --all")
    assert decision.requires_approval and not decision.forbidden
    assert [(p.argv[0], p.tier, p.policy_rule) for p in decision.parts] == [
        ("echo", "never", "tools.run_command.rules[0]"),
        ("frobnicate", "always", None),
    ]
    assert "no rule names the program 'frobnicate'" in decision.parts[1].why
    # A path to a program no rule names is not the program a rule names.
    assert verdict(policy, "/opt/rmx/bin/rmx x").tier == "always"
    assert verdict(policy, "").requires_approval  # nothing to judge: the default


def test_a_preview_sees_the_words_after_the_verb_when_options_come_first(
    kubectl: Policy,
) -> None:
    decision = verdict(kubectl, "kubectl -n web apply -f web.yaml")
    assert decision.policy_rule == "tools.run_command.rules[4]"
    assert decision.preview is not None
    assert decision.preview.argv == ("kubectl", "diff", "-f", "web.yaml")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('approval = "rules"\ndefault = "sometimes"\n' + RM, "tools.run_command.default"),
        ('approval = "always"\ndefault = "never"\n', "default is what a call no rule matches"),
    ],
)
def test_a_wrong_default_stops_loading_naming_it(section: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_toml(f"[tools.run_command]\n{section}")
    assert message in str(caught.value)


def test_help_names_the_default() -> None:
    assert rules(RM, default="never").approval_summary("run_command") == (
        "asks for approval for rm …; commands it cannot judge (substitution, eval, sh -c, "
        'wrappers); any other command runs without approval (default = "never")'
    )


def test_the_option_tables_are_consistent() -> None:
    for name, program in PROGRAMS.items():
        assert not program.valued & program.plain, name
        assert set(program.leading_risky) <= program.valued | program.plain, name
        assert all(option.startswith("-") for option in program.risky), name


@pytest.mark.parametrize(
    ("command", "verb"),
    [
        ("kubectl -n web delete ns web", 3),
        ("kubectl --namespace=web delete", 2),
        ("kubectl -nweb delete", 2),
        ("git -C dir -c k=v --no-pager log", 6),
        ("git -- log", 2),
        ("frobnicate delete", 1),
        ("frobnicate -x delete", None),
        ("kubectl", 1),
    ],
)
def test_the_verbs_place(command: str, verb: int | None) -> None:
    assert layout(tuple(command.split())).verb == verb

"""A rule's `preview` template: checked when the file is read, expanded into an argv
from the simple command the rule matched (never a shell string)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from agent_core import ToolCall
from bot.policy import DEFAULT_PREVIEW_TTL, GateDecision, Policy, PolicyError
from bot.tools.preview import preview_digest, run_preview


def _policy(prefix: list[str], preview: str, extra: str = "") -> Policy:
    return Policy.from_toml(
        '[tools.run_command]\napproval = "rules"\n'
        f"[[tools.run_command.rules]]\nprefix = {json.dumps(prefix)}\n"
        f"preview = {json.dumps(preview)}\n{extra}"
    )


def _decide(policy: Policy, command: str) -> GateDecision:
    call = ToolCall(id="1", name="run_command", arguments=json.dumps({"command": command}))
    return policy.decide("run_command", call)


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("kubectl apply -f app.yaml", ("kubectl", "diff", "-f", "app.yaml")),
        ("kubectl apply -f=app.yaml -n web", ("kubectl", "diff", "-f", "app.yaml")),
        ("kubectl apply -n web -f 'my app.yaml'", ("kubectl", "diff", "-f", "my app.yaml")),
        ("timeout 30 kubectl apply -f a.yaml", ("kubectl", "diff", "-f", "a.yaml")),
    ],
)
def test_arg_takes_the_options_value(command: str, argv: tuple[str, ...]) -> None:
    plan = _decide(_policy(["kubectl", "apply"], "kubectl diff -f {arg:-f}"), command).preview
    assert plan is not None and plan.argv == argv and plan.missing is None


def test_a_long_option_and_alternatives() -> None:
    policy = _policy(["kubectl", "apply"], "kubectl diff -f {arg:-f|--filename}")
    for command in ("kubectl apply --filename x.yaml", "kubectl apply --filename=x.yaml"):
        plan = _decide(policy, command).preview
        assert plan is not None and plan.argv == ("kubectl", "diff", "-f", "x.yaml")


def test_operands_are_the_words_after_the_prefix_that_are_not_options() -> None:
    policy = _policy(["rm"], "ls -ld {operands}")
    plan = _decide(policy, 'rm -rf /srv/app/a "/srv/app/b c" -- -odd').preview
    assert plan is not None
    assert plan.argv == ("ls", "-ld", "/srv/app/a", "/srv/app/b c", "-odd")
    # Only the part the rule decided is previewed; `;` never reaches the preview's argv.
    plan = _decide(policy, "echo ok; rm /srv/x").preview
    assert plan is not None and plan.argv == ("ls", "-ld", "/srv/x")


def test_command_is_the_simple_commands_words() -> None:
    policy = _policy(["kubectl", "apply"], "{command} --dry-run=server")
    plan = _decide(policy, "sudo -u ops kubectl apply -f 'a b.yaml'").preview
    assert plan is not None  # the wrapper is peeled: the preview runs as `run_as`, never sudo
    assert plan.argv == ("kubectl", "apply", "-f", "a b.yaml", "--dry-run=server")
    # Inside a longer word, its shell-quoted text.
    policy = _policy(["kubectl", "apply"], "echo 'would run: {command}'")
    plan = _decide(policy, "kubectl apply -f 'a b.yaml'").preview
    assert plan is not None and plan.argv == ("echo", "would run: kubectl apply -f 'a b.yaml'")


def test_a_placeholder_with_no_value_runs_nothing() -> None:
    plan = _decide(_policy(["kubectl", "apply"], "kubectl diff -f {arg:-f}"), "kubectl apply -k .")
    assert plan.preview is not None and plan.preview.argv is None
    assert plan.preview.missing == "no value for {arg:-f} in this command"
    plan = _decide(_policy(["rm"], "ls -ld {operands}"), "rm -rf")
    assert (
        plan.preview is not None
        and plan.preview.missing == "no value for {operands} in this command"
    )


def test_preview_ttl_defaults_to_ten_minutes() -> None:
    plan = _decide(_policy(["rm"], "ls -ld {operands}"), "rm x").preview
    assert plan is not None and plan.ttl == DEFAULT_PREVIEW_TTL == timedelta(minutes=10)
    plan = _decide(_policy(["rm"], "ls -ld {operands}", 'preview_ttl = "2m"'), "rm x").preview
    assert plan is not None and plan.ttl == timedelta(minutes=2)


@pytest.mark.parametrize(
    ("preview", "message"),
    [
        ("kubectl diff -f {file}", "unknown placeholder {file}"),
        ("kubectl diff -f {arg:f}", "{arg:f} names 'f', which is not an option"),
        ("ls {operands", "unbalanced braces"),
        ("ls 'x", "is not a command line"),
    ],
)
def test_a_bad_template_stops_start_up_naming_the_rule(preview: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        _policy(["kubectl", "apply"], preview)
    assert "tools.run_command.rules[0]" in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('approval = "never"', "apply only to calls that wait for approval"),
        ('preview_ttl = "soon"', "preview_ttl"),
        ('previews = "x"', "unknown key 'tools.run_command.rules[0].previews'"),
    ],
)
def test_preview_keys_are_checked(extra: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        _policy(["rm"], "ls -ld {operands}", extra)
    assert message in str(caught.value)


def test_a_previewed_call_is_never_allowed_for_a_while() -> None:
    with pytest.raises(PolicyError, match='offers no "Allow for"'):
        _policy(["rm"], "ls -ld {operands}", 'allow_for = "1h"')
    # The tool's own allow_for does not reach calls the previewed rule decides.
    policy = Policy.from_toml(
        '[tools.run_command]\napproval = "rules"\nallow_for = "1h"\n'
        '[[tools.run_command.rules]]\nprefix = ["rm"]\npreview = "ls -ld {operands}"\n'
        '[[tools.run_command.rules]]\nprefix = ["touch"]\n'
    )
    assert policy.allow_window("run_command", None, _decide(policy, "rm x")) is None
    assert policy.allow_window("run_command", None, _decide(policy, "touch x")) is not None


def test_preview_ttl_needs_a_preview_and_a_preview_needs_a_prefix() -> None:
    with pytest.raises(PolicyError, match="preview_ttl needs a `preview`"):
        Policy.from_toml(
            '[tools.run_command]\napproval = "rules"\n'
            '[[tools.run_command.rules]]\nprefix = ["rm"]\npreview_ttl = "1m"\n'
        )
    with pytest.raises(PolicyError, match="it needs `prefix`"):
        Policy.from_toml(
            '[tools.web]\napproval = "rules"\n'
            '[[tools.web.rules]]\nargument = "url"\npattern = "x"\npreview = "ls"\n'
        )


async def test_a_preview_runs_as_an_argv_never_through_a_shell(tmp_path: Path) -> None:
    marker = tmp_path / "made"
    result = await run_preview(
        ("echo", f"x; touch {marker}"), workdir=tmp_path, run_as=None, timeout=10
    )
    assert result.failed is None and result.exit_status == 0
    assert result.output == f"x; touch {marker}\n" and not marker.exists()
    assert result.digest == preview_digest(result.output)


async def test_a_preview_that_fails_or_times_out_says_why(tmp_path: Path) -> None:
    failed = await run_preview(("ls", str(tmp_path / "nope")), workdir=tmp_path, run_as=None)
    assert failed.failed == "exit status 2" and "nope" in failed.output
    slow = await run_preview(("sleep", "5"), workdir=tmp_path, run_as=None, timeout=0.2)
    assert slow.failed == "timed out after 0.2s"
    missing = await run_preview(("no-such-program-x",), workdir=tmp_path, run_as=None)
    assert missing.failed is not None and "could not start" in missing.failed


def test_every_value_of_a_repeated_option_is_previewed() -> None:
    policy = _policy(["kubectl", "apply"], "kubectl diff -f {arg:-f|--filename}")
    plan = _decide(policy, "kubectl apply -f web.yaml --filename=evil.yaml -fmore.yaml").preview
    assert plan is not None
    assert plan.argv == (
        *("kubectl", "diff", "-f", "web.yaml", "-f", "evil.yaml", "-f", "more.yaml"),
    )
    assert plan.inputs == ("web.yaml", "evil.yaml", "more.yaml")
    # Inside a word, the word is repeated; without an option before it, one word each.
    plan = _decide(_policy(["kubectl", "apply"], "diff --from={arg:-f}"), "kubectl apply -f a -f b")
    assert plan.preview is not None and plan.preview.argv == ("diff", "--from=a", "--from=b")
    plan = _decide(_policy(["kubectl", "apply"], "cat {arg:-f}"), "kubectl apply -f a -f b")
    assert plan.preview is not None and plan.preview.argv == ("cat", "a", "b")


@pytest.mark.parametrize(
    ("command", "inputs"),
    [
        ("kubectl apply -f a.yaml -f a.yaml", ("a.yaml",)),
        ("kubectl apply -k overlays/prod", ("overlays/prod",)),
        ("kubectl apply --kustomize=base --filename x", ("base", "x")),
        ("kubectl apply -f - ", ()),
        ("kubectl apply -- -f x", ()),
    ],
)
def test_a_plan_names_the_files_the_command_reads(command: str, inputs: tuple[str, ...]) -> None:
    plan = _decide(_policy(["kubectl", "apply"], "kubectl diff {operands}"), command).preview
    assert plan is not None and plan.inputs == inputs


def test_the_files_are_named_even_when_the_preview_cannot_run() -> None:
    plan = _decide(_policy(["kubectl", "apply"], "kubectl diff -f {arg:-f}"), "kubectl apply -k d")
    assert plan.preview is not None and plan.preview.argv is None
    assert plan.preview.inputs == ("d",)


async def test_a_preview_reads_its_inputs_and_binds_them(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text("replicas: 3\n")
    result = await run_preview(
        ("cat", "web.yaml"), workdir=tmp_path, run_as=None, inputs=("web.yaml", "gone.yaml")
    )
    assert [(i.path, i.state) for i in result.inputs] == [
        ("web.yaml", "file"),
        ("gone.yaml", "absent"),
    ]
    assert result.digest != preview_digest(result.output)  # it covers the files too
    assert result.failed == "it does not show 'gone.yaml', which the command reads"


@pytest.mark.parametrize(
    "command",
    [
        "cd /x && kubectl apply -f web.yaml",
        "pushd /x; kubectl apply -f web.yaml",
        "(cd /x; kubectl apply -f web.yaml)",
        "builtin cd /x; kubectl apply -f web.yaml",
        "popd && kubectl apply -f web.yaml",
    ],
)
def test_a_directory_change_before_the_previewed_part_fails_its_preview(command: str) -> None:
    """The preview would read `web.yaml` in the tool's directory, the command applies
    `/x/web.yaml`: no preview (nor file binding) built on the wrong directory."""
    plan = _decide(_policy(["kubectl", "apply"], "cat {arg:-f}"), command).preview
    assert plan is not None and plan.argv is None and plan.inputs == ()
    assert plan.missing == "the command changes directory before the previewed part"


def test_a_directory_change_after_the_previewed_part_leaves_its_preview() -> None:
    plan = _decide(_policy(["kubectl", "apply"], "cat {arg:-f}"), "kubectl apply -f a; cd /x")
    assert plan.preview is not None and plan.preview.argv == ("cat", "a")


@pytest.mark.parametrize(
    "command", ["KUBECONFIG=/prod kubectl apply -f x", "env KUBECONFIG=/prod kubectl apply -f x"]
)
def test_a_previewed_part_with_assignments_fails_its_preview(command: str) -> None:
    """Previewed in the bot's own environment, it would show another cluster's diff."""
    plan = _decide(_policy(["kubectl", "apply"], "kubectl diff -f {arg:-f}"), command).preview
    assert plan is not None and plan.argv is None
    assert plan.missing == "the previewed part runs with its own environment (KUBECONFIG)"


def test_a_previewed_part_with_file_name_patterns_fails_its_preview() -> None:
    """The shell turns `*.yaml` into file names; the preview's argv, run without a shell,
    would look for a file named `*.yaml`."""
    plan = _decide(_policy(["kubectl", "apply"], "cat {arg:-f}"), "kubectl apply -f *.yaml")
    assert plan.preview is not None and plan.preview.argv is None
    assert plan.preview.missing is not None and "file-name patterns" in plan.preview.missing

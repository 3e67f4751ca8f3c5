"""Programs' options, as data: where a command's verb is, and which options write or run
something.

A rule's `prefix` (`["kubectl", "delete"]`) names a program and its verb, but programs take
options before their verb (`kubectl -n web delete ns web`, `git -C dir reset --hard`). So a rule
matches after the options this table knows the program takes there, and an option it does not
know makes the verb's place unknown (an unknown option may take the next word as its value): the
part then needs a card at least, and a rule that could match at any later word still applies.

Some options write a file or run another program (`git -c core.pager=…` runs any program,
`curl -o FILE` writes one): a read-only rule (`approval = "never"`) does not cover a command that
uses one. `leading_risky` options count only before the verb (`git -p log` pages, `git log -p`
prints a patch); `risky` ones anywhere in the words, a one-letter one also inside a cluster
(`curl -sSLo f`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["PROGRAMS", "Layout", "Program", "layout", "risky_options"]


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


@dataclass(frozen=True, slots=True)
class Program:
    """One program's options before its verb, and the options that write or run something."""

    valued: frozenset[str] = frozenset()
    """Options before the verb that take a value (`-n web`, `-nweb`, `--namespace=web`)."""
    plain: frozenset[str] = frozenset()
    """Options before the verb without a value."""
    leading_risky: dict[str, str] = field(default_factory=dict)
    """Options that write or run something when given before the verb, and why."""
    risky: dict[str, str] = field(default_factory=dict)
    """Options that write or run something wherever they are, and why."""


_RUNS_CONFIG = "sets configuration, which can name a program to run"
_KUBECONFIG = "reads another kubeconfig, whose exec credentials run a program"

PROGRAMS: dict[str, Program] = {
    "kubectl": Program(
        valued=_set(
            "-n --namespace --context --cluster --user --kubeconfig -s --server --token --as "
            "--as-group --as-uid --request-timeout --certificate-authority --client-certificate "
            "--client-key --tls-server-name -v --v --cache-dir --profile --profile-output "
            "--log-file --username --password --vmodule"
        ),
        plain=_set(
            "--insecure-skip-tls-verify --match-server-version --warnings-as-errors "
            "--disable-compression --logtostderr --alsologtostderr"
        ),
        risky={
            "--kubeconfig": _KUBECONFIG,
            "--profile-output": "writes a profile to a file",
            "--log-file": "writes its log to a file",
        },
    ),
    "git": Program(
        valued=_set(
            "-C -c --config-env --git-dir --work-tree --namespace --super-prefix --attr-source"
        ),
        plain=_set(
            "-p --paginate -P --no-pager --bare --exec-path --no-replace-objects "
            "--literal-pathspecs --glob-pathspecs --noglob-pathspecs --icase-pathspecs "
            "--no-optional-locks --no-advice --no-lazy-fetch --html-path --man-path --info-path"
        ),
        leading_risky={
            "-c": _RUNS_CONFIG,
            "--config-env": _RUNS_CONFIG,
            "--exec-path": "runs git's commands from another directory",
            "-p": "pages its output through a program",
            "--paginate": "pages its output through a program",
            "-C": "works in another repository, whose configuration can run a program",
            "--git-dir": "uses another repository, whose configuration can run a program",
            "--work-tree": "works in another tree, with hooks and configuration of its own",
        },
        risky={
            "--output": "writes its output to a file",
            "--ext-diff": "runs an external diff program",
            "--textconv": "runs text conversion programs",
            "--exec": "runs a program",
            "--upload-pack": "runs a program on the remote side",
            "--receive-pack": "runs a program on the remote side",
            "--open-files-in-pager": "opens files in a program",
            "--paginate": "pages its output through a program",
        },
    ),
    "docker": Program(
        valued=_set(
            "--context -c --config -H --host -l --log-level --tlscacert --tlscert --tlskey"
        ),
        plain=_set("-D --debug --tls --tlsverify"),
        leading_risky={"--config": "reads another client configuration (credential helpers)"},
    ),
    "helm": Program(
        valued=_set(
            "-n --namespace --kube-context --kubeconfig --kube-apiserver --kube-as-user "
            "--kube-as-group --kube-ca-file --kube-token --kube-tls-server-name "
            "--registry-config --repository-cache --repository-config --burst-limit --qps"
        ),
        plain=_set("--debug --kube-insecure-skip-tls-verify"),
        risky={
            "--kubeconfig": _KUBECONFIG,
            "--post-renderer": "runs a program on the rendered manifests",
            "--output-dir": "writes files",
        },
    ),
    "systemctl": Program(
        valued=_set(
            "-H --host -M --machine -t --type -s --signal --state -p --property --root -n "
            "--lines -o --output --kill-whom --kill-value --job-mode --what --timestamp"
        ),
        plain=_set(
            "--user --system --global -q --quiet --no-block --no-wall --no-pager "
            "--no-ask-password -a --all -l --full -f --force --now -r --recursive --runtime "
            "--no-reload --no-legend --plain -i --ignore-inhibitors --dry-run --show-types "
            "--value --wait"
        ),
    ),
    "terraform": Program(valued=_set("-chdir"), plain=_set("-help -version")),
    "aws": Program(
        valued=_set(
            "--profile --region --output --endpoint-url --query --ca-bundle --cli-read-timeout "
            "--cli-connect-timeout --color --cli-binary-format"
        ),
        plain=_set(
            "--debug --no-verify-ssl --no-paginate --no-sign-request --cli-auto-prompt "
            "--no-cli-auto-prompt --no-cli-pager"
        ),
    ),
    "gcloud": Program(
        valued=_set(
            "--project --account --configuration --verbosity --format --billing-project "
            "--impersonate-service-account --flags-file --trace-token"
        ),
        plain=_set("-q --quiet --log-http --no-user-output-enabled --user-output-enabled"),
    ),
    "ssh": Program(
        valued=_set("-B -b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w"),
        plain=_set("-4 -6 -A -a -C -f -G -g -K -k -M -N -n -q -s -T -t -V -v -X -x -Y -y"),
        risky={
            "-o": "sets options, some of which run a program (ProxyCommand, LocalCommand)",
            "-F": "reads another configuration, which can run a program",
        },
    ),
    "curl": Program(
        risky={
            "-o": "writes to a file",
            "--output": "writes to a file",
            "-O": "writes to a file",
            "--remote-name": "writes to a file",
            "--remote-name-all": "writes to files",
            "--output-dir": "writes to a directory",
            "-D": "writes headers to a file",
            "--dump-header": "writes headers to a file",
            "-c": "writes cookies to a file",
            "--cookie-jar": "writes cookies to a file",
            "--trace": "writes a trace to a file",
            "--trace-ascii": "writes a trace to a file",
            "--stderr": "writes errors to a file",
            "--libcurl": "writes source code to a file",
            "-K": "reads options from a file",
            "--config": "reads options from a file",
        }
    ),
    "wget": Program(
        risky={
            "-O": "writes to a file",
            "--output-document": "writes to a file",
            "-o": "writes its log to a file",
            "--output-file": "writes its log to a file",
            "-a": "appends its log to a file",
            "--append-output": "appends its log to a file",
        }
    ),
    "sort": Program(risky={"-o": "writes to a file", "--output": "writes to a file"}),
    "base64": Program(risky={"-o": "writes to a file", "--output": "writes to a file"}),
    "sed": Program(risky={"-i": "edits files in place", "--in-place": "edits files in place"}),
    "rg": Program(
        risky={
            "--pre": "runs a program on each file",
            "--hostname-bin": "runs a program",
            "--search-zip": "runs decompression programs",
            "-z": "runs decompression programs",
        }
    ),
    "find": Program(
        risky={
            "-delete": "deletes files",
            "-fls": "writes to a file",
            "-fprint": "writes to a file",
            "-fprint0": "writes to a file",
            "-fprintf": "writes to a file",
            "-exec": "runs a program",
            "-execdir": "runs a program",
            "-ok": "runs a program",
            "-okdir": "runs a program",
        }
    ),
}
"""Program (base name) → its options; a program not here takes no options before its verb."""

_NONE = Program()


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the verb of a simple command is."""

    verb: int | None
    """The index in argv of the first word after the leading options; None: unknown."""
    unknown: str | None = None
    """The option before the verb that the table does not know (when `verb` is None)."""

    def leading(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """The options (and their values) before the verb."""
        end = self.verb if self.verb is not None else len(argv)
        return argv[1:end]


def _program(argv: tuple[str, ...]) -> Program:
    return PROGRAMS.get(os.path.basename(argv[0]) if argv else "", _NONE)


def layout(argv: tuple[str, ...]) -> Layout:
    """The verb's place in `argv`, after the options its program takes before it."""
    table = _program(argv)
    index = 1
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return Layout(index + 1)
        if not word.startswith("-") or word == "-":
            return Layout(index)
        name = word.split("=", 1)[0]
        if name in table.valued:
            index += 1 if "=" in word else 2
        elif name in table.plain or (word[:2] in table.valued and not word.startswith("--")):
            index += 1
        else:
            return Layout(None, word)
    return Layout(index)


def _uses(word: str, option: str) -> bool:
    if word == option or word.startswith(option + "="):
        return True
    if len(option) == 2 and option[0] == "-" and word.startswith("-") and word[1:2] != "-":
        return option[1] in word[1:]  # `-sSLo`, `-ofile`: a cluster holding the letter
    return False


def risky_options(argv: tuple[str, ...], where: Layout) -> tuple[tuple[str, str], ...]:
    """The options of `argv` that write or run something, each with why (none after `--`)."""
    table = _program(argv)
    found: list[tuple[str, str]] = []
    leading = where.leading(argv)
    for word in leading:
        for option, why in table.leading_risky.items():
            if _uses(word, option) and (word[:2] == option or len(option) > 2):
                found.append((option, why))
    for word in argv[1:]:
        if word == "--":
            break
        for option, why in table.risky.items():
            if _uses(word, option):
                found.append((option, why))
    return tuple(dict.fromkeys(found))

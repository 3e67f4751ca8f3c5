"""The preview on an approval card: what the deciding rule's read-only command printed, its exit
status, when it ran, the files it read with their digests, and the "Re-run preview" button.

The output is untrusted (a command's) and reaches mrkdwn only through `bot.slack.mrkdwn`. The
card shows its first lines; the rest is cut with a note naming the file the run service attached
to the thread with the whole output (the digest covers the whole output). A failed preview says
"preview failed" and keeps Approve: the person deciding sees the warning and the output.
"""

from __future__ import annotations

from slack_sdk.models.blocks import Block, ButtonElement, PlainTextObject, SectionBlock
from slack_sdk.models.blocks.basic_components import MarkdownTextObject

from ..runs.views import PREVIEW_LINES, CardCall, CardPreview
from ..words import count
from .ids import ACTION_RERUN_PREVIEW
from .mrkdwn import code_span, escape_cut, preformatted

__all__ = ["PREVIEW_LINES", "preview_blocks", "preview_digest_text", "rerun_button"]

_OUTPUT_BUDGET = 2400
_SECTION_MAX = 3000
_INPUTS_SHOWN = 10


def preview_blocks(call: CardCall) -> list[Block]:
    """The preview's blocks (none when the call has no preview)."""
    preview = call.preview
    if preview is None:
        return []
    blocks: list[Block] = [_section(_heading(preview))]
    if preview.inputs:
        blocks.append(_section(_inputs(preview)))
    shown, hidden = _first_lines(preview.output)
    if shown:
        blocks.append(_section(shown))
    if hidden:
        where = (
            f"the whole output is attached to the thread as {code_span(preview.file, 80)}; "
            if preview.file
            else ""
        )
        blocks.append(
            _section(
                f"_… {count(hidden, 'more line')} of the preview cut; {where}its digest "
                f"{code_span(preview.digest[:12], 12)} covers the whole output._"
            )
        )
    return blocks


def preview_digest_text(call: CardCall) -> str | None:
    """The preview's digest for the card's context line, beside the call's digest."""
    return None if call.preview is None else f"preview digest {code_span(call.preview.digest[:12])}"


def rerun_button(call: CardCall) -> list[ButtonElement]:
    """ "Re-run preview", on a pending card whose call has a preview."""
    if call.preview is None:
        return []
    return [
        ButtonElement(
            text=PlainTextObject(text="Re-run preview"),
            action_id=ACTION_RERUN_PREVIEW,
            value=call.ledger_id,
        )
    ]


def _heading(preview: CardPreview) -> str:
    ran = preview.ran_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    command = code_span(preview.command, 300)
    if preview.failed is not None:
        return (
            f":warning: *preview failed* ({escape_cut(preview.failed, 300)}): {command} · "
            f"ran {ran}\nApprove is still offered: read the output before approving."
        )
    return f":mag: *Preview* {command} · exit {preview.exit_status} · ran {ran}"


_STATES = {
    "directory": "directory, its files' digest",
    "absent": "no such file: the run refuses if one appears",
    "unreadable": "cannot be read: the run will refuse",
}


def _inputs(preview: CardPreview) -> str:
    """One line per file the preview read: the run checks each digest first."""
    lines = ["Files read, bound to Approve (the run refuses if one changes):"]
    for path, state, digest in preview.inputs[:_INPUTS_SHOWN]:
        what = f"sha256 {code_span(digest[:16], 16)}" if digest else ""
        note = _STATES.get(state)
        shown = ", ".join(part for part in (what, note) if part)
        lines.append(f"• {code_span(path, 200)} {shown}")
    if len(preview.inputs) > _INPUTS_SHOWN:
        lines.append(f"• … and {count(len(preview.inputs) - _INPUTS_SHOWN, 'more file')}")
    return "\n".join(lines)


def _first_lines(output: str) -> tuple[str, int]:
    """The first lines of `output` as a code block within the card's budget, and how many
    lines were left out."""
    lines = output.rstrip("\n").split("\n") if output.strip() else []
    if not lines:
        return "", 0
    kept = 0
    block = ""
    for end in range(1, min(len(lines), PREVIEW_LINES) + 1):
        candidate, cut = preformatted("\n".join(lines[:end]), _SECTION_MAX - 100)
        if cut or len(candidate) > _OUTPUT_BUDGET:
            break
        kept, block = end, candidate
    if kept == 0:  # one very long first line: cut it
        block, _ = preformatted(lines[0][:400], _SECTION_MAX - 100)
        kept = 1
    return block, len(lines) - kept


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text[:_SECTION_MAX], verbatim=True))

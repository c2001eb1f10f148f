"""Block Kit for the policy lifecycle: the draft modal and the after-the-fact review message.

The draft modal takes the YAML as a file (a plain text input holds only 3,000 characters) or,
for a short policy, as text. Slack sends the file's id on submission; a job fetches it.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    InputBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.blocks.block_elements import FileInputElement
from slack_sdk.models.views import View

from refund_desk import money
from refund_desk.bot.blocks.cards import text_input
from refund_desk.bot.mrkdwn import render
from refund_desk.policy.schema import PolicyDocument
from refund_desk.policy.words import rule_name
from refund_desk.storage.models import ReviewSample

DRAFT_MODAL = "policy_draft_modal"
REVIEW_RIGHT, REVIEW_WRONG = "policy_review_right", "policy_review_wrong"
MAX_TEXT_INPUT = 3000

HELP = """*`/refund-policy`* — everyone the policy names may read; only
its leads may change anything.
*Read*
• `show [vN]` the policy in words (a draft: `show d3`; the YAML: `show v2 yaml`) · `history`
  · `drafts` · `validate DRAFT` every problem with its rule · `diff vA vB` what changed (drafts too)
• `case CASE_ID` a decision with its counterfactual · `shadow report` · `reviews`
*Change (leads)*
• `draft` new draft (modal: upload the YAML) · `draft dN` replace its text · `draft from vN`
• `test DRAFT` embedded tests · `backtest DRAFT [--days N]` replay stored cases
• `shadow start DRAFT` / `shadow stop`
• `publish DRAFT` / `rollback vN`: what it changes, then `… confirm HASH` with the hash it shows
• `mode shadow|approve-all|supervised` · `pause` / `resume` (the kill switch)
• `review-rate 5%|policy` · `second-lead on|off` (every change but a pause needs a second
  lead; anything looser always does)
Publishing needs: valid, embedded tests pass, and a backtest over the last 30 days on exactly
that text."""


def draft_modal(draft_id: int | None, channel: str) -> View:
    """New draft, or new text for ``draft_id``: a file input, or a short text."""
    title = "New policy draft" if draft_id is None else f"Replace draft d{draft_id}"
    return View(
        type="modal",
        callback_id=DRAFT_MODAL,
        private_metadata=f"{draft_id or ''}|{channel}",
        title=title[:24],
        submit="Save draft",
        close="Cancel",
        blocks=[
            InputBlock(
                block_id="file",
                label="Policy YAML file",
                optional=True,
                element=FileInputElement(
                    action_id="value", filetypes=["yaml", "yml", "txt"], max_files=1
                ),
            ),
            text_input(
                "source",
                "…or paste a short policy (up to 3,000 characters)",
                optional=True,
                multiline=True,
                max_length=MAX_TEXT_INPUT,
            ),
        ],
    )


def draft_submission(view: dict[str, Any]) -> tuple[str | None, str | None]:
    """(file id, pasted text) from a submitted draft modal."""
    values: dict[str, dict[str, Any]] = view.get("state", {}).get("values", {})
    empty: dict[str, Any] = {}
    files = next(iter(values.get("file", empty).values()), empty).get("files") or []
    text = next(iter(values.get("source", empty).values()), empty).get("value")
    file_id = str(files[0]["id"]) if files else None
    return file_id, text if isinstance(text, str) and text.strip() else None


def review_blocks(
    sample: ReviewSample, answer: str | None = None, doc: PolicyDocument | None = None
) -> list[dict[str, Any]]:
    """The review question; with the case's policy ``doc``, the rule is named by what it is
    for."""
    amount = money.format_money(sample.amount, sample.currency)
    rule = render(rule_name(doc, sample.rule))
    head = (
        f":mag: *After-the-fact review*: case `{sample.case_id}` was refunded {amount} "
        f"automatically under {rule} (policy v{sample.policy_version or '-'}). "
        "Was that right?"
    )
    blocks: list[Any] = [SectionBlock(text=MarkdownTextObject(text=head))]
    if answer is None:
        blocks.append(
            ActionsBlock(
                block_id="review",
                elements=[
                    ButtonElement(text="Looks right", action_id=REVIEW_RIGHT, value=sample.case_id),
                    ButtonElement(
                        text="This was wrong",
                        action_id=REVIEW_WRONG,
                        value=sample.case_id,
                        style="danger",
                    ),
                ],
            )
        )
    else:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=answer)))
    return [b.to_dict() for b in blocks]

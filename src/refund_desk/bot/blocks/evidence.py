"""Evidence on the case card: links (thumbnails where Slack can fetch them) and `Mark checked`.

Thumbnails only for https links: Slack fetches images itself, and a link it cannot reach makes
the whole card fail to post. The items come opened (`evidence.shown`): the customer's link
and file name in plain text, or "[erased]" once their key is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ImageBlock,
    MarkdownTextObject,
    SectionBlock,
)

from refund_desk.bot.mrkdwn import escape
from refund_desk.cases.advisory import ERASED
from refund_desk.storage.models import Case

MAX_ITEMS = 5
ACTION = "evidence_checked"


def _in_link(url: str) -> str:
    """A URL inside `<url|label>`: escaped, and a `|` encoded, so the customer's text cannot
    become the link's label on the card."""
    return escape(url).replace("|", "%7C")


def _label(item: dict[str, Any], number: int) -> str:
    checked = f"checked by <@{item['checked_by']}>" if item.get("checked_by") else "not checked"
    if item.get("kind") == "link":
        url = item.get("url")
        if not url or url == ERASED:
            return f"link {number} (customer's link, erased, {checked})"
        return f"<{_in_link(str(url))}|link {number}> (customer's link, {checked})"
    size = int(str(item.get("size") or 0)) // 1024
    name = "photo" if str(item.get("content_type", "")).startswith("image/") else "document"
    target = item.get("view_url")
    shown = f"<{target}|{name} {number}>" if target else f"{name} {number}"
    filename = escape(str(item.get("filename") or "")).replace("`", "'")
    named = f" `{filename}`" if filename else ""
    return f"{shown}{named} ({item.get('content_type')}, {size} KB, {checked})"


def evidence_blocks(case: Case, items: Sequence[dict[str, Any]], *, decidable: bool) -> list[Block]:
    """The card's evidence section for `items`, the case's evidence opened for its readers."""
    total, checked = len(items), sum(1 for i in items if i.get("checked_by"))
    items = list(items)[:MAX_ITEMS]
    if not items:
        return []
    lines = [f"*Evidence* ({total}, {checked} checked)"]
    lines += [f"• {_label(item, n)}" for n, item in enumerate(items, start=1)]
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text="\n".join(lines)[:2900]))]
    for n, item in enumerate(items, start=1):
        url = str(item.get("view_url") or "")
        if url.startswith("https://") and str(item.get("content_type", "")).startswith("image/"):
            blocks.append(ImageBlock(image_url=url, alt_text=f"Customer photo {n}"))
    buttons = [
        ButtonElement(
            text=f"Mark {n} checked",
            action_id=f"{ACTION}:{n}",
            value=f"{case.id}|{item['id']}",
        )
        for n, item in enumerate(items, start=1)
        if not item.get("checked_by")
    ]
    if decidable and buttons:
        blocks.append(ActionsBlock(block_id="evidence", elements=buttons))
    return blocks

"""Slack's documented limits on messages, blocks and views, so the emulator refuses what Slack
would refuse (and a card that works here does not fail in a real workspace): 50 blocks in a
message and 100 in a modal or App Home, 3,000 characters in a section's text, button values up to
2,000 characters, action_ids up to 255 and unique within their block."""

from __future__ import annotations

from typing import Any

from refund_desk.demo.slack.state import SlackError

MAX_MESSAGE_TEXT = 40_000
BLOCK_TYPES = {
    "section",
    "header",
    "divider",
    "context",
    "actions",
    "input",
    "image",
    "rich_text",
    "file",
    "video",
}
ELEMENT_TYPES = {
    "button",
    "static_select",
    "plain_text_input",
    "image",
    "overflow",
    "datepicker",
    "checkboxes",
    "radio_buttons",
    "users_select",
    "conversations_select",
    "file_input",
    "number_input",
    "email_text_input",
    "url_text_input",
    "multi_static_select",
}


class InvalidBlocks(SlackError):
    def __init__(self, why: str) -> None:
        super().__init__("invalid_blocks")
        self.why = why


def _text(obj: Any, limit: int, where: str, *, plain: bool = False) -> str:
    if not isinstance(obj, dict) or obj.get("type") not in ("plain_text", "mrkdwn"):
        raise InvalidBlocks(f"{where}: must be a text object")
    if plain and obj["type"] != "plain_text":
        raise InvalidBlocks(f"{where}: must be plain_text")
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        raise InvalidBlocks(f"{where}: text must be a non-empty string")
    if len(text) > limit:
        raise InvalidBlocks(f"{where}: must be at most {limit} characters")
    return text


def _element(element: Any, where: str) -> None:
    if not isinstance(element, dict) or element.get("type") not in ELEMENT_TYPES:
        raise InvalidBlocks(f"{where}: unknown element type")
    if len(str(element.get("action_id", ""))) > 255:
        raise InvalidBlocks(f"{where}: action_id over 255 characters")
    if element["type"] == "button":
        _text(element.get("text"), 75, f"{where}.text", plain=True)
        if len(str(element.get("value", ""))) > 2000:
            raise InvalidBlocks(f"{where}: value over 2000 characters")
        if element.get("style") not in (None, "primary", "danger"):
            raise InvalidBlocks(f"{where}: style must be primary or danger")
        confirm = element.get("confirm")
        if confirm is not None:
            _text(confirm.get("title"), 100, f"{where}.confirm.title", plain=True)
            _text(confirm.get("text"), 300, f"{where}.confirm.text")
    if element["type"] == "number_input" and not isinstance(
        element.get("is_decimal_allowed"), bool
    ):
        raise InvalidBlocks(f"{where}: number_input needs is_decimal_allowed")
    if element["type"] == "static_select":
        options = element.get("options") or []
        if not options or len(options) > 100:
            raise InvalidBlocks(f"{where}: a select needs 1 to 100 options")
        for n, option in enumerate(options):
            _text(option.get("text"), 75, f"{where}.options[{n}].text", plain=True)


def check_blocks(blocks: Any, *, limit: int) -> None:
    if not isinstance(blocks, list):
        raise InvalidBlocks("blocks must be an array")
    if len(blocks) > limit:
        raise InvalidBlocks(f"no more than {limit} blocks")
    seen: set[str] = set()
    for n, block in enumerate(blocks):
        where = f"blocks[{n}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES:
            raise InvalidBlocks(f"{where}: unknown block type {kind!r}")
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in seen or len(str(block_id)) > 255:
                raise InvalidBlocks(f"{where}: block_id must be unique and short")
            seen.add(str(block_id))
        if kind == "header":
            _text(block.get("text"), 150, f"{where}.text", plain=True)
        elif kind == "section":
            fields = block.get("fields") or []
            if block.get("text") is None and not fields:
                raise InvalidBlocks(f"{where}: a section needs text or fields")
            if block.get("text") is not None:
                _text(block["text"], 3000, f"{where}.text")
            if len(fields) > 10:
                raise InvalidBlocks(f"{where}: no more than 10 fields")
            for i, item in enumerate(fields):
                _text(item, 2000, f"{where}.fields[{i}]")
            if block.get("accessory") is not None:
                _element(block["accessory"], f"{where}.accessory")
        elif kind == "context":
            elements = block.get("elements") or []
            if not elements or len(elements) > 10:
                raise InvalidBlocks(f"{where}: a context needs 1 to 10 elements")
            for i, item in enumerate(elements):
                if item.get("type") != "image":
                    _text(item, 3000, f"{where}.elements[{i}]")
        elif kind == "actions":
            elements = block.get("elements") or []
            if not elements or len(elements) > 25:
                raise InvalidBlocks(f"{where}: actions need 1 to 25 elements")
            actions: set[str] = set()
            for i, item in enumerate(elements):
                _element(item, f"{where}.elements[{i}]")
                action_id = item.get("action_id")
                if action_id is not None and action_id in actions:
                    raise InvalidBlocks(f"{where}.elements[{i}]: action_id must be unique")
                actions.add(action_id)
        elif kind == "input":
            _text(block.get("label"), 2000, f"{where}.label", plain=True)
            _element(block.get("element"), f"{where}.element")
        elif kind == "image":
            if not str(block.get("image_url", "")).startswith(("http://", "https://")):
                raise InvalidBlocks(f"{where}: image_url must be a URL")
            if not block.get("alt_text"):
                raise InvalidBlocks(f"{where}: alt_text is required")


def check_message(params: dict[str, Any]) -> None:
    text = params.get("text") or ""
    if not isinstance(text, str):
        raise SlackError("invalid_arguments")
    if len(text) > MAX_MESSAGE_TEXT:
        raise SlackError("msg_too_long")
    blocks = params.get("blocks")
    if blocks is not None:
        check_blocks(blocks, limit=50)
    if not text and not blocks:
        raise SlackError("no_text")


def check_view(view: Any, *, kind: str) -> dict[str, Any]:
    if not isinstance(view, dict) or view.get("type") != kind:
        raise SlackError("invalid_arguments")
    check_blocks(view.get("blocks") or [], limit=100)
    if kind == "modal":
        _text(view.get("title"), 24, "view.title", plain=True)
        for key in ("submit", "close"):
            if view.get(key) is not None:
                _text(view[key], 24, f"view.{key}", plain=True)
        if len(str(view.get("private_metadata", ""))) > 3000:
            raise InvalidBlocks("view.private_metadata: over 3000 characters")
        has_input = any(b.get("type") == "input" for b in view.get("blocks") or [])
        if has_input and view.get("submit") is None:
            raise InvalidBlocks("view.submit: required when the view has input blocks")
    return view

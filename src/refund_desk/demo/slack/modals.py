"""A modal's submitted state, shaped as Slack shapes `view.state.values`."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

REQUIRED = "Please fill out this required field."
NOT_A_NUMBER = "Please enter a number."
NOT_WHOLE = "Please enter a whole number."
NOT_AN_EMAIL = "Please enter a valid email address."
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def format_problem(element: dict[str, Any], text: str) -> str | None:
    """What Slack's client says before it lets a number or email input be submitted."""
    if element.get("type") == "number_input":
        try:
            number = Decimal(text)
        except InvalidOperation:
            return NOT_A_NUMBER
        if not number.is_finite():
            return NOT_A_NUMBER
        if not element.get("is_decimal_allowed") and number != number.to_integral_value():
            return NOT_WHOLE
    if element.get("type") == "email_text_input" and not EMAIL.match(text):
        return NOT_AN_EMAIL
    return None


def submission_values(
    view: dict[str, Any], entered: dict[str, str | None]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Slack's `state.values` for the modal's input blocks, and the required inputs left empty.

    Only the modal's own input blocks count (the page cannot invent fields), and a select's
    value must be one of its options, as in Slack's client.
    """
    values: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for block in view.get("blocks") or []:
        if block.get("type") != "input":
            continue
        block_id = str(block.get("block_id", ""))
        element = block.get("element") or {}
        action_id = str(element.get("action_id", ""))
        raw = entered.get(block_id)
        text = raw if isinstance(raw, str) and raw.strip() else None
        if element.get("type") == "static_select":
            option = next((o for o in element.get("options") or [] if o.get("value") == text), None)
            state: dict[str, Any] = {"type": "static_select", "selected_option": option}
            filled = option is not None
        else:
            state = {"type": element.get("type", "plain_text_input"), "value": text}
            filled = text is not None
        if not filled and not block.get("optional"):
            missing[block_id] = REQUIRED
        elif text is not None and (problem := format_problem(element, text)) is not None:
            missing[block_id] = problem
        values[block_id] = {action_id: state}
    return values, missing

"""A modal's submitted state, shaped as Slack shapes `view.state.values`."""

from __future__ import annotations

from typing import Any

REQUIRED = "Please fill out this required field."


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
        values[block_id] = {action_id: state}
    return values, missing

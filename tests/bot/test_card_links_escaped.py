"""Found in review: a customer's link becomes `<url|link n>` on the approvers' card
without escaping `|`, and `links_in` keeps `|` in a URL, so the customer chooses the words the
card shows for their link (architecture.md: a customer's words never become a link)."""

from __future__ import annotations

import re

from refund_desk.bot.blocks.evidence import evidence_blocks
from refund_desk.cases import evidence
from refund_desk.storage.models import Case


def test_a_customers_link_cannot_choose_its_own_text_on_the_card() -> None:
    [url] = evidence.links_in(
        "Broken. https://evil.example/x|Manager_approved:_refund_at_once see above"
    )
    item = {"id": "l0-abc", "kind": "link", "url": url, "checked_by": None}
    case = Case(id="case_1", evidence=[item])
    blocks = evidence_blocks(case, [item], decidable=True)
    text = str(blocks[0].to_dict())
    labels = re.findall(r"<[^|>]+\|([^>]+)>", text)
    assert labels == ["link 1"], labels

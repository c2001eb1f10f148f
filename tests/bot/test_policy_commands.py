"""`/refund-policy` through signed requests: the policy lifecycle, leads-only authority, the
publishing gate, pinned versions, the kill switch, shadow runs and after-the-fact review."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from refund_desk.bot.policy_jobs import Progress
from refund_desk.governance.backtest import ensure_backtest
from refund_desk.governance.drafts import save_draft
from refund_desk.governance.versions import control
from refund_desk.storage.audit import Actor, verify_chain
from refund_desk.storage.models import AuditRecord, Case
from tests.bot.helpers import approve
from tests.conftest import TEST_SECRET
from tests.helpers import ACME
from tests.slack_helpers import SlackHarness, fixture

LEAD, OTHER_LEAD, NOT_LEAD = "U0LEAD1", "U0LEAD2", "U0FIN1"
# v2 of the policy: small damaged orders only refund themselves up to $10 now.
TWO_LEADS = ACME.read_text().replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
STRICTER = ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 10 and")
STRICTER = STRICTER.replace("{amount: 20, reason: damaged}", "{amount: 5, reason: damaged}")
BROKEN_TEST = ACME.read_text().replace(
    "expect: {outcome: approve, rule: damaged-small}", "expect: {outcome: deny}"
)


@pytest.fixture()
def desk(sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]) -> SlackHarness:
    return slack_desk(sqlite_url, ACME.read_text())


def say(desk: SlackHarness, text: str, user: str = LEAD) -> str:
    """A signed `/refund-policy` request; returns the ephemeral answer."""
    response = desk.slash(user, "/refund-policy", text)
    assert response.status_code == 200, response.text
    return str(response.text)


def confirm_command(answer: str) -> str:
    """The `publish DRAFT confirm HASH` an answer shows (the hash names the text shown)."""
    found = re.search(r"(publish d\d+ confirm [0-9a-f]{16})`", answer)
    assert found, answer
    return found[1]


def submit_draft(
    desk: SlackHarness,
    *,
    file_text: str | None = None,
    text: str | None = None,
    user: str = LEAD,
    file_id: str | None = None,
) -> Any:
    """Open the draft modal and submit it the way Slack does (a file input sends file ids)."""
    desk.slack.views.clear()
    assert say(desk, "draft", user) == ""  # the modal opens instead of an answer
    [view] = desk.slack.views
    payload = fixture("view_submission.json")
    payload["user"]["id"] = user
    payload["view"].update(
        callback_id=view["callback_id"], private_metadata=view["private_metadata"]
    )
    if file_text:
        file_id = desk.slack.add_file("policy.yaml", file_text)
    files = [{"id": file_id}] if file_id else []
    payload["view"]["state"] = {
        "values": {
            "file": {"value": {"type": "file_input", "files": files}},
            "source": {"value": {"type": "plain_text_input", "value": text}},
        }
    }
    response = desk.interaction(payload)
    desk.settle()
    return response


def audit(desk: SlackHarness) -> list[AuditRecord]:
    with desk.runtime.db.read() as session:
        return list(session.scalars(select(AuditRecord).order_by(col(AuditRecord.seq))).all())


def policy_messages(desk: SlackHarness) -> list[str]:
    return [m.text for m in desk.slack.in_channel("C0POLICY")]


def active_version(desk: SlackHarness) -> int | None:
    with desk.runtime.db.read() as session:
        return control(session).active_version


def automatic_case(desk: SlackHarness, amount: str = "20.00") -> str:
    """A small damaged order: the acme policy refunds it by itself (tier 2)."""
    payment = desk.payment(amount)
    response = desk.post(desk.request(payment, amount))
    assert response.status_code == 201, response.text
    desk.settle()
    return str(response.json()["id"])


def test_draft_test_backtest_publish_rollback_each_on_the_record(
    any_db_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(any_db_url, TWO_LEADS)
    old_case = automatic_case(desk)  # decided by v1: approve by damaged-small
    assert desk.get(old_case)["status"] == "refunded"

    stricter = STRICTER.replace("leads: [U0LEAD1]", "leads: [U0LEAD1, U0LEAD2]")
    submit_draft(desk, file_text=stricter)  # over 3,000 characters is fine: it is a file
    assert any("Saved draft *d1*: valid" in m.text for m in desk.slack.ephemeral)
    assert "1 passed, 0 failed" in say(desk, "test d1")
    refused = say(desk, "publish d1")
    assert "No backtest over the last 30 days" in refused and active_version(desk) == 1

    assert "started" in say(desk, "backtest d1")
    desk.settle()
    summary = policy_messages(desk)[-1]
    assert "1 case, 0 unchanged, 1 would be decided differently" in summary
    assert (
        f"• paid automatically → decided by a person: 1 case, 20.00 USD (e.g. `{old_case}`)"
        in summary
    )
    assert (  # the rule that decides now, by its description
        "Changes by the rule that now decides: the default (Anything else goes to the support "
        "leads): 1 case." in summary
    )
    assert "Proved against v1: nowhere more permissive:" in summary
    assert "• Denied:" not in summary and "• A person decides instead of an automatic" in summary
    [report] = desk.slack.uploads("C0POLICY")
    rows = list(csv.DictReader(io.StringIO(report["content"])))
    assert [(r["case_id"], r["was_outcome"], r["now_outcome"]) for r in rows] == [
        (old_case, "approve", "review")
    ]
    diff = say(desk, "diff v1 d1")
    assert diff.split("\n")[:2] == [
        "Changes from v1 to d1:",
        "~ “Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves” "
        "(`damaged-small`): when `request.amount &lt;=` `50` → `10`",
    ]

    asked = say(desk, "publish d1")  # first what it would do, and nothing changes
    assert "makes it the live policy for every new case" in asked and active_version(desk) == 1
    assert "when `request.amount &lt;=` `50` → `10`" in asked  # the diff, the backtest, the proof
    assert "paid automatically → decided by a person: 1 case" in asked
    assert "publish d1 confirm" in asked
    published = say(desk, "publish d1 confirm")
    assert "published d1 as *acme-refunds v2*" in published and active_version(desk) == 2
    assert "paid automatically → decided by a person: 1 case" in policy_messages(desk)[-1]
    # back to the looser v1: first what it changes, then a second lead confirms the same hash
    shown = say(desk, "rollback v1")
    assert "Rolling back to v1 makes its text the live policy" in shown
    assert "Changes from v2 to v1:" in shown and "`10` → `50`" in shown
    assert "Proved against v2: more permissive (" in shown and "• Pays automatically: " in shown
    who = f"with the same hash: <@{OTHER_LEAD}>."
    assert f"Then a second lead confirms it (it is more permissive) {who}" in shown
    assert active_version(desk) == 2 and "policy.change_requested" not in {
        r.action for r in audit(desk)
    }
    rollback = re.search(r"`/refund-policy (rollback v1 confirm [0-9a-f]{16})`", shown)
    assert rollback, shown
    assert "Not rolled back" in say(desk, "rollback v1 confirm")  # a hash names what was seen
    assert "needs a second lead" in say(desk, rollback[1]) and active_version(desk) == 2
    assert "rolled back to v1" in say(desk, rollback[1], OTHER_LEAD)
    assert active_version(desk) == 3
    history = say(desk, "history", NOT_LEAD)  # an approver may read
    # Slack's date formatting in the reader's zone, with a fallback that names UTC
    when = r"on <!date\^\d+\^\{date_short_pretty\} \{time\}\|\w{3} \d+, \d{4} \d\d:\d\d UTC>"
    hashes = r"· hash `[0-9a-f]{12}`"
    assert re.fullmatch(
        "Policy history, newest first:\n"
        rf"• \*v3\* \(active\): published by <@{OTHER_LEAD}> {when}, rollback to v1 {hashes}\n"
        rf"• \*v2\*: published by <@{LEAD}> {when} {hashes}\n"
        rf"• \*v1\*: published by tests \(command line\) {when} {hashes}",
        history,
    ), history

    actions = {r.action: f"{r.actor_kind}:{r.actor_id}" for r in audit(desk)}
    for action in (
        "policy.draft_created",
        "policy.tested",
        "policy.backtested",
        "policy.published",
        "policy.change_requested",
    ):
        assert actions[action] == f"human:{LEAD}", action
    assert actions["policy.rolled_back"] == f"human:{OTHER_LEAD}"
    with desk.runtime.db.read() as session:
        assert verify_chain(TEST_SECRET, session).ok


def test_a_file_slack_will_not_show_gets_an_answer_not_silence(desk: SlackHarness) -> None:
    submit_draft(desk, file_id="F0GONE")
    told = [m.text for m in desk.slack.ephemeral if m.to == LEAD]
    assert any("Draft not saved" in t and "file_not_found" in t for t in told), told
    assert "files.info" in desk.slack.methods()


def test_a_non_lead_is_refused_and_nothing_changes(desk: SlackHarness) -> None:
    submit_draft(desk, text=STRICTER)
    say(desk, "backtest d1")
    desk.settle()
    before = len(audit(desk))
    for text in ("publish d1", "pause", "mode shadow", "rollback v1", "test d1", "draft"):
        answer = say(desk, text, NOT_LEAD)
        assert answer.startswith(":no_entry: Only the policy's leads"), (text, answer)
    assert len(audit(desk)) == before and active_version(desk) == 1
    with desk.runtime.db.read() as session:
        switches = control(session)
        assert (switches.paused, switches.mode) == (False, "supervised")
    assert "acme-refunds v1" in say(desk, "show", NOT_LEAD)  # approvers read
    assert "Valid policy" in say(desk, "validate d1", NOT_LEAD)


def test_a_draft_with_a_failing_embedded_test_cannot_be_published(desk: SlackHarness) -> None:
    submit_draft(desk, text=BROKEN_TEST)
    assert "FAIL small damaged order refunds itself" in say(desk, "test d1")
    say(desk, "backtest d1")
    desk.settle()
    answer = say(desk, "publish d1")
    assert answer.startswith(":no_entry: 1 policy test(s) failed") and active_version(desk) == 1


def test_bad_input_gets_a_clear_answer(desk: SlackHarness) -> None:
    assert "Unknown subcommand `frobnicate`" in say(desk, "frobnicate")
    assert "There is no draft d9" in say(desk, "publish d9")
    assert "Usage: `/refund-policy rollback vN [confirm HASH]`" in say(desk, "rollback")
    assert "expected a version like v2" in say(desk, "rollback d1")
    assert "Mode must be one of" in say(desk, "mode yolo")
    assert "--days must be between 1 and 365" in say(desk, "backtest v1 --days 0")
    response = submit_draft(desk)  # neither a file nor text
    assert response.json()["response_action"] == "errors"


def test_a_case_started_under_v1_is_decided_and_executed_under_v1(desk: SlackHarness) -> None:
    desk.runtime.desk.jobs_elsewhere = True  # the case waits in `received` until a sweep
    payment = desk.payment("20.00")
    case_id = desk.post(desk.request(payment, "20.00")).json()["id"]
    assert desk.get(case_id)["status"] == "received"
    submit_draft(desk, text=STRICTER)
    say(desk, "backtest d1")
    desk.settle()
    assert "published" in say(desk, "publish d1 confirm") and active_version(desk) == 2
    desk.settle()
    desk.sweep(seconds_ahead=10)  # past the grace in which the request itself would run it
    case = desk.get(case_id)
    assert case["status"] == "refunded"  # v2 would have sent it to a person
    assert case["decision"]["policy_version"] == 1 and case["decision"]["rule"] == "damaged-small"
    assert len(desk.refunds_at_processor(payment)) == 1
    desk.runtime.desk.jobs_elsewhere = False
    newer = automatic_case(desk)  # started under v2: a person must look
    assert desk.get(newer)["status"] == "awaiting_approval"


def test_pause_stops_every_execution_and_resume_carries_on(desk: SlackHarness) -> None:
    assert "paused execution" in say(desk, "pause")
    assert "already paused" in say(desk, "pause")  # said twice: nothing changes
    automatic = automatic_case(desk)
    big = desk.payment("900.00")
    manual = desk.post(desk.request(big, "600.00")).json()["id"]
    desk.settle()
    approve(desk, "U0FIN1")
    for case_id in (automatic, manual):
        assert desk.get(case_id)["status"] == "approved"  # recorded, not paid
    assert desk.refunds_at_processor(big) == []
    desk.sweep(seconds_ahead=120)  # waiting out the retry delay pays nothing either
    assert desk.refunds_at_processor(big) == [] and desk.get(manual)["status"] == "approved"

    assert "resumed execution (2 waiting refunds)" in say(desk, "resume")
    desk.settle()
    for case_id in (automatic, manual):
        assert desk.get(case_id)["status"] == "refunded"
    assert len(desk.refunds_at_processor(big)) == 1
    assert [m for m in policy_messages(desk) if "paused execution" in m]
    paused = [r for r in audit(desk) if r.action in ("policy.paused", "policy.resumed")]
    assert [(r.action, r.actor_id) for r in paused] == [
        ("policy.paused", LEAD),
        ("policy.resumed", LEAD),
    ]


def test_mode_approve_all_sends_every_refund_to_a_person(desk: SlackHarness) -> None:
    assert "set the mode to *approve-all*" in say(desk, "mode approve-all")
    case_id = automatic_case(desk)
    assert desk.get(case_id)["status"] == "awaiting_approval"
    assert "already *approve-all*" in say(desk, "mode approve-all")


def test_shadow_run_compares_without_effect(desk: SlackHarness) -> None:
    submit_draft(desk, text=STRICTER)
    assert "started a shadow run of d1" in say(desk, "shadow start d1")
    refunded = automatic_case(desk)  # live: approve; shadow (<= $10): review
    small = automatic_case(desk, "5.00")  # both approve
    assert desk.get(refunded)["status"] == "refunded"  # the shadow has no effect
    report = say(desk, "shadow report", NOT_LEAD)
    assert "1 of 2 cases agree (50%)" in report
    assert f"`{refunded}` 20.00 USD: live approve (`damaged-small`), shadow review" in report
    assert small not in report
    assert "Shadow d1: review" in say(desk, f"case {refunded}")
    assert "stopped the shadow run" in say(desk, "shadow stop")
    assert "No shadow run" in say(desk, "shadow report")


def test_counterfactual_is_for_operators_only(desk: SlackHarness) -> None:
    payment = desk.payment("60.00")
    case_id = desk.post(desk.request(payment, "60.00")).json()["id"]
    desk.settle()
    shown = say(desk, f"case {case_id}", NOT_LEAD)
    assert (
        f"Case `{case_id}`: awaiting approval, 60.00 USD; policy v1: decided by a person (tier "
        "3), under the default (Anything else goes to the support leads)." in shown
    )
    assert "would be approved at 50.00 USD or less (operators only)" in shown
    assert "would be approved" in str(desk.card("C0REFUNDS").blocks)
    desk.click("U0LEAD1", "deny", desk.buttons("C0REFUNDS")["deny"], channel="C0REFUNDS")
    [modal] = [v for v in desk.slack.views if v["callback_id"] == "deny_modal"]
    desk.submit(LEAD, "deny_modal", modal["private_metadata"], {"reason": "Not covered."})
    desk.settle()
    with desk.runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None and case.status == "denied"
        assert "would be approved" not in (case.customer_message or "")


def test_after_the_fact_review_records_a_wrong_refund_against_its_rule(
    desk: SlackHarness,
) -> None:
    assert "review sample to 100%" in say(desk, "review-rate 100%")
    case_id = automatic_case(desk)
    assert desk.get(case_id)["status"] == "refunded"
    [message] = [m for m in desk.slack.in_channel("C0POLICY") if "After-the-fact" in m.text]
    damaged = "“Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves”"
    assert f"automatically under {damaged} (`damaged-small`) (policy v1)" in str(message.blocks)
    value = desk.slack.buttons(message)["policy_review_wrong"]
    for user in ("U0STRANGER", NOT_LEAD, "U0FIN2"):  # not in the policy; an approver; too late
        payload = fixture("block_actions.json")
        payload["user"]["id"] = user
        payload["channel"]["id"] = payload["container"]["channel_id"] = message.channel
        payload["message"]["ts"] = payload["container"]["message_ts"] = message.ts
        payload["actions"][0].update(action_id="policy_review_wrong", value=value)
        assert desk.interaction(payload).status_code == 200
    desk.settle()
    assert f"was wrong (under {damaged} (`damaged-small`))" in str(message.blocks)
    record = [r for r in audit(desk) if r.action == "policy.review_answered"]
    assert [(r.actor_id, r.payload) for r in record] == [
        (NOT_LEAD, {"answer": "wrong", "rule": "damaged-small"})
    ]
    assert f"• {damaged} (`damaged-small`): 1 / 1" in say(desk, "reviews")
    told = {m.to: m.text for m in desk.slack.ephemeral}
    assert "Only the policy's approvers" in told["U0STRANGER"]
    assert f"was already reviewed by <@{NOT_LEAD}>." in told["U0FIN2"]


def test_a_second_lead_confirms_a_publish_when_the_setting_asks(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, TWO_LEADS)
    assert "needs a second lead" in say(desk, "second-lead on")
    submit_draft(
        desk, text=TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 40 and")
    )
    say(desk, "backtest d1")
    desk.settle()
    # without the hash of what was shown, nothing is asked: the answer shows the hash
    confirm = confirm_command(say(desk, "publish d1 confirm"))
    assert "needs a second lead" in say(desk, confirm) and active_version(desk) == 1
    assert "another lead must confirm" in say(desk, confirm)
    assert "published d1 as" in say(desk, confirm, OTHER_LEAD) and active_version(desk) == 2


def published_proof(desk: SlackHarness) -> dict[str, Any]:
    [record] = [r for r in audit(desk) if r.action == "policy.published"][-1:]
    return dict(record.payload["proof"])


def test_a_looser_version_needs_a_second_lead_even_with_the_rule_off(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, TWO_LEADS)
    looser = TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 400 and")
    submit_draft(desk, text=looser)
    say(desk, "backtest d1")
    desk.settle()
    assert any("Proved against v1: more permissive" in m.text for m in desk.slack.messages)
    confirm = confirm_command(say(desk, "publish d1"))
    asked = say(desk, confirm)
    assert "needs a second lead" in asked and "more permissive" in asked, asked
    assert active_version(desk) == 1
    assert "published d1 as" in say(desk, confirm, OTHER_LEAD) and active_version(desk) == 2
    proof = published_proof(desk)
    assert proof["against"] == 1 and proof["more_permissive"] is True
    assert len(proof["hash"]) == 64


def test_a_tighter_version_is_published_by_one_lead_with_its_proof_on_record(
    desk: SlackHarness,
) -> None:
    submit_draft(
        desk, text=ACME.read_text().replace("request.amount <= 50 and", "request.amount <= 40 and")
    )
    say(desk, "backtest d1")
    desk.settle()
    assert "published d1 as" in say(desk, "publish d1 confirm") and active_version(desk) == 2
    assert published_proof(desk)["more_permissive"] is False


def test_a_long_backtest_shows_progress_then_its_summary_in_the_same_message(
    desk: SlackHarness,
) -> None:
    progress = Progress(desk.surface.outbox, "C0POLICY", "Backtesting d1", after=0, every=0)
    progress(2000)
    progress(4000)
    ts = progress.finish("Backtest of d1: done.")
    [message] = desk.slack.in_channel("C0POLICY")
    assert message.ts == ts and message.text == "Backtest of d1: done." and message.updates == 2


def test_a_rate_limit_after_a_backtest_resumes_its_report_and_never_runs_it_again(
    desk: SlackHarness,
) -> None:
    submit_draft(desk, text=STRICTER)
    automatic_case(desk)
    desk.slack.rate_limits["files.getUploadURLExternal"] = 1
    say(desk, "backtest d1")
    desk.settle()
    assert desk.slack.uploads("C0POLICY") == []  # the upload waits out Retry-After
    desk.sweep(seconds_ahead=5)
    desk.sweep(seconds_ahead=10)
    [upload] = desk.slack.uploads("C0POLICY")
    assert upload["name"].startswith("backtest-d1-")
    runs = [r for r in audit(desk) if r.action == "policy.backtested"]
    assert len(runs) == 1, "the backtest ran once"
    summaries = [t for t in policy_messages(desk) if "Backtest" in t or "backtest" in t]
    assert len([t for t in summaries if t.startswith("<@")]) == 1, summaries


def test_a_second_leads_confirmation_names_the_text_they_were_shown(
    sqlite_url: str, slack_desk: Callable[[str, str], SlackHarness]
) -> None:
    desk = slack_desk(sqlite_url, TWO_LEADS)
    submit_draft(
        desk, text=TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 40 and")
    )
    say(desk, "backtest d1")
    desk.settle()
    shown = confirm_command(say(desk, "publish d1", OTHER_LEAD))  # lead 2 reads the tight text
    looser = TWO_LEADS.replace("request.amount <= 50 and", "request.amount <= 400 and")
    with desk.runtime.db.write() as session:  # lead 1 swaps in a looser text, backtested
        audit, lead = desk.runtime.desk.audit, Actor("human", LEAD)
        save_draft(session, audit, source=looser, actor=lead, draft_id=1)
        ensure_backtest(session, audit, source=looser, actor=lead)
    now = confirm_command(say(desk, "publish d1"))
    assert now != shown and "needs a second lead" in say(desk, now)
    assert "Not published" in say(desk, "publish d1 confirm", OTHER_LEAD)
    stale = say(desk, shown, OTHER_LEAD)
    assert "Not done" in stale and now.split()[-1] in stale and active_version(desk) == 1
    assert "Usage" in say(desk, "publish d1 now please", OTHER_LEAD)
    assert "published d1 as" in say(desk, now, OTHER_LEAD) and active_version(desk) == 2


def test_the_policy_reads_in_words_with_its_text_a_command_away(desk: SlackHarness) -> None:
    shown = say(desk, "show", NOT_LEAD)
    said = shown.split("\n")
    assert said[0].startswith("*acme-refunds v1* (published by tests (command line), hash `")
    assert said[1] == "The first rule that matches a request decides:"
    assert (
        "3. Damaged items up to 50.00 USD, bought in the last 30 days, refund themselves "
        "(`damaged-small`): paid automatically (tier 2)." in said
    )
    assert (
        '    details: `damaged-small` when `request.reason == "damaged" and request.amount '
        "&lt;= 50 and order.age_days &lt;= 30`" in said
    )
    assert (
        "Otherwise (Anything else goes to the support leads): decided by support leads (up to "
        "500.00 USD), tier 3." in said
    )
    assert (
        "Approvers: support leads (<@U0LEAD1>, <@U0LEAD2>, up to 500.00 USD); finance "
        "(<@U0FIN1>, <@U0FIN2>, up to 5000.00 USD in <#C0FINANCE>)." in said
    )
    assert "Channels: approvals <#C0REFUNDS>, policy <#C0POLICY>, finance <#C0FINANCE>." in said
    assert re.search(r"(?<![@#])\b[UC]0[A-Z]", shown) is None, "every id is a mention"
    assert said[-1] == "The text itself: `/refund-policy show v1 yaml`."
    text = say(desk, "show v1 yaml", NOT_LEAD)
    assert "```policy: acme-refunds\n" in text and "leads: [U0LEAD1]" in text
    assert say(desk, "show yaml", NOT_LEAD) == text  # the active version's
    assert "Usage: `/refund-policy show [vN|dN] [yaml]`" in say(desk, "show v1 d1", NOT_LEAD)
    submit_draft(desk, text=STRICTER)
    assert say(desk, "drafts") == "Drafts:\n• d1 by <@U0LEAD1>, valid"


def test_a_lone_lead_hears_that_nobody_can_confirm_a_looser_draft(desk: SlackHarness) -> None:
    submit_draft(desk, text=ACME.read_text().replace("amount <= 50 and", "amount <= 80 and"))
    say(desk, "backtest d1")
    desk.settle()
    asked = say(desk, "publish d1")
    assert (
        "• Pays automatically: amount 50.01 to 80.00 USD, reason damaged, order up to 30 days "
        "old — e.g. " in asked
    )
    assert (
        ":warning: It needs a second lead (it is more permissive), and the active policy names "
        "no other lead, so nobody can confirm it here" in asked
    )

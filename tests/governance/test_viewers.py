"""`viewers`: finance and auditors read everything and decide nothing. `roles` says "viewer", the
desk and `/refund find` let them read, no decision names them, an assistant acting as one may not
propose, the prover lists a change of viewers without calling it looser, and a backtest of a
version that only changes viewers flips nothing."""

from __future__ import annotations

import io

from refund_desk.cases.approvals import deciders
from refund_desk.cases.people import may_read, reads_only, roles
from refund_desk.governance.backtest import run_backtest
from refund_desk.governance.versions import load_version
from refund_desk.mcp_server import operator
from refund_desk.policy import CompiledPolicy, parse_policy
from refund_desk.policy.prove import prove
from refund_desk.policy.schema import usergroups
from refund_desk.policy.words import policy_words, setting_words
from refund_desk.runtime import Runtime
from refund_desk.storage.models import Case
from tests.helpers import ACME, Harness
from tests.web.desk.conftest import browser

AUDITOR = "U0AUD1"
REVIEW = "review_sample_rate: 0.05"
BASE = ACME.read_text()
WITH_VIEWERS = BASE.replace(
    REVIEW, REVIEW + f"\nviewers: {{members: [{AUDITOR}], usergroup: S0AUDIT}}"
)


def test_a_viewer_reads_and_decides_nothing() -> None:
    doc = parse_policy(WITH_VIEWERS)
    assert roles(doc, AUDITOR, None) == ["viewer"]
    assert may_read(doc, AUDITOR, None) and reads_only(doc, AUDITOR, None)
    assert not reads_only(doc, "U0LEAD1", None)
    assert "S0AUDIT" in usergroups(doc)  # its members are read from the directory
    said = policy_words(doc).as_text()
    assert "Viewers (read everything, decide nothing): " in said and AUDITOR in said


def test_the_prover_lists_viewers_and_never_calls_them_looser() -> None:
    added = prove(BASE, WITH_VIEWERS, describe=False)
    assert {s.name: s.permissive for s in added.settings} == {
        "viewers.members": False,
        "viewers.usergroup": False,
    }
    assert not added.more_permissive
    assert "added" in setting_words(added.settings[0]).as_text()
    removed = prove(WITH_VIEWERS, BASE, describe=False)
    assert not removed.more_permissive and len(removed.settings) == 2


def test_a_backtest_of_a_change_of_viewers_flips_nothing(runtime: Runtime) -> None:
    harness = Harness(runtime)
    harness.publish()
    for amount in ("5.00", "30.00", "700.00"):
        payment = harness.payment(amount)
        assert harness.post(harness.request(payment, amount)).status_code in (200, 201, 202)
    harness.sweep()
    run = run_backtest(
        runtime.db,
        CompiledPolicy.compile(parse_policy(WITH_VIEWERS)),
        label="viewers",
        csv_out=io.StringIO(),
    )
    assert run.summary["cases"] == 3 and run.summary["changed"] == 0


def test_a_viewer_reads_the_desk_decides_nothing_and_proposes_nothing(runtime: Runtime) -> None:
    harness = Harness(runtime)
    harness.publish(WITH_VIEWERS)
    page = browser(harness, AUDITOR).get("/desk")
    assert page.status_code == 200 and "viewer" in page.text
    payment = harness.payment("700.00")
    case_id = harness.post(harness.request(payment, "700.00")).json()["id"]
    harness.sweep()
    with runtime.db.read() as session:
        case = session.get(Case, case_id)
        assert case is not None and case.status not in ("refunded", "denied")
        who = deciders(session, case, load_version(session, case.policy_version))
    assert who.approvers is not None and AUDITOR not in who.approvers.members
    assert who.managers is None or AUDITOR not in who.managers.members
    caller = operator(runtime, AUDITOR)
    assert caller.reads_personal and not caller.may_propose
    assert operator(runtime, "U0LEAD1").may_propose

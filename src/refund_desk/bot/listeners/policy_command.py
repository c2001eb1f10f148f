"""`/refund-policy`: everyone the policy names (leads, approvers, managers, operators, viewers)
may read it (`help` answers everyone); its leads draft, test, backtest, shadow-run, publish,
roll back, set the mode and pull the kill switch.

A listener does one short transaction (off the event loop) and acknowledges with an
ephemeral answer; each change commits with its audit record and its message to the policy
channel. Slow work (a backtest, reading an uploaded file) is a job started after ``ack()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sqlmodel import Session

from refund_desk import money
from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks.policy import (
    DRAFT_MODAL,
    HELP,
    REVIEW_RIGHT,
    REVIEW_WRONG,
    draft_modal,
    draft_submission,
    review_blocks,
)
from refund_desk.bot.doctor import DOCTOR_JOB
from refund_desk.bot.listeners.actions import tell as tell_person
from refund_desk.bot.outbox import active_doc, enqueue_call
from refund_desk.bot.policy_jobs import (
    BACKTEST_JOB,
    DRAFT_FILE_JOB,
    announce,
    clip,
    policy_channel,
    tell,
)
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError, Forbidden, InvalidRequest, NotFound, Refused
from refund_desk.cases.people import Directory, is_lead, is_one_of, may_read
from refund_desk.governance import admin as policy_admin
from refund_desk.governance import drafts, review, shadow
from refund_desk.governance.proof import proof_against_active
from refund_desk.governance.versions import by_whom, control, history, load_version
from refund_desk.jobs.queue import queue
from refund_desk.policy import policy_hash
from refund_desk.policy.diff import diff_text
from refund_desk.policy.words import OUTCOME_DONE, policy_words, rule_name
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, PolicyVersion, ReviewSample, ShadowDecision
from refund_desk.text import Code, Strong, Text, lines, text

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

MAX_DAYS = 365


class Reply:
    """The ephemeral answer (a core ``Text`` is rendered to mrkdwn here), jobs to start after
    ack() (None: nothing was queued), and a draft modal to open."""

    def __init__(
        self,
        said: Text | str,
        jobs: Sequence[int | None] = (),
        modal_for: tuple[int | None] | None = None,  # (draft id or None,): open the modal
    ) -> None:
        self.text = mrkdwn.render(said)
        self.jobs = [job for job in jobs if job is not None]
        self.modal_for = modal_for


def usage(text: str) -> InvalidRequest:
    return InvalidRequest("usage", f"Usage: `/refund-policy {text}`")


@dataclass
class PolicyCommands:
    """Parses `/refund-policy TEXT` and calls the `cases` services."""

    desk: Desk
    default_channel: str | None

    def run(self, user: str, channel: str | None, text: str) -> Reply:
        args = text.split()
        sub, rest = (args[0].lower(), args[1:]) if args else ("help", [])
        if sub == "shadow" and rest:
            sub, rest = f"shadow {rest[0].lower()}", rest[1:]
        try:
            if sub in self.READS:
                with self.desk.db.read() as session:
                    if sub != "help":
                        self._require_reader(session, user)
                    return Reply(self.READS[sub](self, session, rest))
            if sub in self.CHANGES:
                return self.CHANGES[sub](self, user, channel, rest)
        except CaseError as exc:
            return Reply(f":no_entry: {mrkdwn.render(exc.text)}")
        return Reply(f":no_entry: Unknown subcommand `{mrkdwn.escape(sub)}`.\n{HELP}")

    # ------------------------------------------------------------ reading

    def _require_reader(self, session: Session, user: str) -> None:
        """Case details, the policy, counterfactuals and history are for the leads, approvers,
        managers and the policy's operators and viewers; others get a short refusal."""
        doc = active_doc(session)  # nothing published: nothing to keep from anyone
        if doc is not None and not may_read(doc, user, self.desk.directory):
            raise Forbidden(
                "not_a_reader",
                "Only the policy's leads, approvers, managers, operators and viewers may read "
                "this.",
            )

    def help(self, session: Session, rest: list[str]) -> str:
        switches = control(session)
        mode = "paused" if switches.paused else switches.mode
        line = f"Mode: *{mode}*, active version: v{switches.active_version or '-'}"
        if switches.shadow_draft:
            line += f", shadow: d{switches.shadow_draft}"
        return f"{line}.\n{HELP}"

    def show(self, session: Session, rest: list[str]) -> Text | str:
        """The policy in words (rules by description, people by name, each rule's expression
        on its details line); `show vN yaml` is the text itself."""
        as_yaml = bool(rest) and rest[-1].lower() == "yaml"
        named = rest[:-1] if as_yaml else rest
        if len(named) > 1:
            raise usage("show [vN|dN] [yaml]")
        if named:
            ref = drafts.parse_ref(named[0])
        else:
            active = control(session).active_version
            if active is None:
                return "No policy version is published yet."
            ref = drafts.Ref("version", active)
        source = drafts.source_of(session, ref)
        head = _heading(session, ref)
        if as_yaml:
            return mrkdwn.render(head) + f"\n```{clip(source, 2800)}```"
        doc, problems = drafts.validate_text(source)
        if doc is None:
            return lines(head, problems)
        more = text("The text itself: ", Code(f"/refund-policy show {ref} yaml"), ".")
        return lines(head, policy_words(doc), more)

    def list_drafts(self, session: Session, rest: list[str]) -> Text | str:
        rows = drafts.list_drafts(session)
        if not rows:
            return "No drafts yet: `/refund-policy draft` starts one."
        return lines(
            "Drafts:",
            *[text(f"• d{d.id} by ", by_whom(d.author), f", {_draft_state(d)}") for d in rows],
        )

    def validate(self, session: Session, rest: list[str]) -> Text:
        if len(rest) != 1:
            raise usage("validate DRAFT")
        return drafts.validate_text(drafts.source_of(session, drafts.parse_ref(rest[0])))[1]

    def diff(self, session: Session, rest: list[str]) -> str:
        if len(rest) != 2:
            raise usage("diff vA vB")
        refs = [drafts.parse_ref(r) for r in rest]
        docs = []
        for ref in refs:
            doc, message = drafts.validate_text(drafts.source_of(session, ref))
            if doc is None:
                raise InvalidRequest("policy_invalid", text(f"{ref}: ", message))
            docs.append(doc)
        said = diff_text(docs[0], docs[1], old=str(refs[0]), new=str(refs[1]))
        return clip(mrkdwn.render(said))

    def reviews(self, session: Session, rest: list[str]) -> str:
        rows = review.wrong_by_rule(session)
        if not rows:
            return "No after-the-fact reviews answered yet."
        doc = active_doc(session)  # rules named as the active version describes them
        return "After-the-fact reviews (wrong / answered, by the rule that fired):\n" + "\n".join(
            f"• {mrkdwn.render(rule_name(doc, rule))}: {wrong} / {answered}"
            for rule, wrong, answered in rows
        )

    def case(self, session: Session, rest: list[str]) -> str:
        """A decision for operators, with its counterfactual (never shown to the customer)."""
        if len(rest) != 1:
            raise usage("case CASE_ID")
        case = session.get(Case, rest[0])
        if case is None:
            raise NotFound("case_not_found", f"No case {rest[0]} exists.")
        decision = case.decision or {}
        amount = money.format_money(case.amount, case.currency)
        doc = load_version(session, case.policy_version).doc if case.policy_version else None
        outcome = decision.get("outcome")
        rule = mrkdwn.render(rule_name(doc, str(decision.get("rule") or "-")))
        said = [
            f"Case `{case.id}`: {case.status.replace('_', ' ')}, {amount}; "
            f"policy v{case.policy_version or '-'}: "
            + (
                f"{OUTCOME_DONE.get(outcome, outcome)} (tier {decision.get('tier', '-')}), "
                f"under {rule}."
                if outcome
                else "nothing decided yet."
            )
        ]
        if decision.get("counterfactual"):
            said.append(f":bulb: {decision['counterfactual']} (operators only)")
        shadowed = session.get(ShadowDecision, case.id)
        if shadowed is not None:
            said.append(f"Shadow d{shadowed.draft_id}: {shadowed.outcome} by `{shadowed.rule}`.")
        return "\n".join(said)

    READS: ClassVar[dict[str, Callable[[PolicyCommands, Session, list[str]], Text | str]]] = {
        "help": help,
        "show": show,
        "history": lambda self, session, rest: history(session),
        "drafts": list_drafts,
        "validate": validate,
        "diff": diff,
        "case": case,
        "shadow report": lambda self, session, rest: shadow.report(session),
        "reviews": reviews,
    }

    # ------------------------------------------------------------ changing (leads only)

    def _change(
        self,
        user: str,
        act: Callable[[Session, Actor], drafts.Change],
        *,
        doctor: bool = False,
    ) -> Reply:
        """Lead check, the change with its audit record, and its announcement: one transaction
        (with `doctor`, the workspace is checked against the version afterwards)."""
        with self.desk.db.write() as session:
            drafts.require_lead(session, user, self.desk.directory)
            change = act(session, Actor("human", user))
            jobs: list[int | None] = list(change.jobs)
            if doctor:
                jobs.append(queue(session, kind=DOCTOR_JOB, payload={"reason": "publish"}))
            if change.announce:
                jobs.append(announce(session, self.default_channel, change.announce))
        return Reply(change.reply, jobs)

    def draft(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        if rest and rest[0].lower() == "from":
            if len(rest) != 2:
                raise usage("draft from vN")
            ref = drafts.parse_ref(rest[1], allow=("version",))

            def copy(session: Session, actor: Actor) -> drafts.Change:
                source = drafts.source_of(session, ref)
                return drafts.save_draft(session, self.desk.audit, source=source, actor=actor)[1]

            return self._change(user, copy)
        draft_id = drafts.parse_ref(rest[0], allow=("draft",)).number if rest else None
        with self.desk.db.read() as session:
            drafts.require_lead(session, user, self.desk.directory)
            if draft_id is not None:
                drafts.get_draft(session, draft_id)
        return Reply("", modal_for=(draft_id,))

    def test(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        ref = _one_draft(rest, "test DRAFT")
        return self._change(
            user, lambda s, a: drafts.test_draft(s, self.desk.audit, draft_id=ref, actor=a)
        )

    def backtest(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        days = 30
        if len(rest) == 3 and rest[1] == "--days" and rest[2].isdigit():
            days = int(rest[2])
        elif len(rest) != 1:
            raise usage("backtest DRAFT [--days N]")
        if not 1 <= days <= MAX_DAYS:
            raise InvalidRequest("bad_days", f"--days must be between 1 and {MAX_DAYS}.")
        ref = drafts.parse_ref(rest[0])
        with self.desk.db.write() as session:
            drafts.require_lead(session, user, self.desk.directory)
            source = drafts.source_of(session, ref)
            doc, message = drafts.validate_text(source)
            if doc is None:
                raise InvalidRequest("policy_invalid", text(f"{ref}: ", message))
            target = policy_channel(session, self.default_channel) or channel or user
            job = queue(
                session,
                kind=BACKTEST_JOB,
                payload={
                    "ref": str(ref),
                    "content_hash": policy_hash(doc),
                    "days": days,
                    "user": user,
                    "channel": target,
                },
            )
        return Reply(
            f"Backtest of {ref} over the last {days} days started; the summary and the full "
            f"report (CSV) will be in <#{target}>.",
            [job],
        )

    def shadow_start(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        ref = _one_draft(rest, "shadow start DRAFT")
        return self._change(
            user, lambda s, a: shadow.start(s, self.desk.audit, draft_id=ref, actor=a)
        )

    def shadow_stop(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        return self._change(user, lambda s, a: shadow.stop(s, self.desk.audit, actor=a))

    def publish(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        """`publish DRAFT` shows what the gate found and the hash of exactly that text over
        the active version; `publish DRAFT confirm HASH` publishes it (or asks a second lead,
        or confirms another lead's request for the same hash). `publish DRAFT confirm`
        without a hash publishes only when one lead is enough, else it shows the hash."""
        confirmed = len(rest) in (2, 3) and rest[1].lower() == "confirm"
        if len(rest) > 1 and not confirmed:
            raise usage("publish DRAFT [confirm HASH]")
        ref = _one_draft(rest[:1], "publish DRAFT [confirm HASH]")
        given = rest[2] if len(rest) == 3 else None
        self._prove_ahead(drafts.Ref("draft", ref))
        if not confirmed:
            with self.desk.db.read() as session:
                drafts.require_lead(session, user, self.desk.directory)
                return Reply(policy_admin.preview_publish(session, draft_id=ref, asker=user))
        return self._change(
            user,
            lambda s, a: policy_admin.publish_draft(
                s, self.desk.audit, draft_id=ref, actor=a, confirm=given
            ),
            doctor=True,
        )

    def _prove_ahead(self, ref: drafts.Ref) -> None:
        """Prove a draft or version against the active one in a read, so the write
        transaction of its publish or rollback finds it proved."""
        with self.desk.db.read() as session:
            try:
                source = drafts.source_of(session, ref)
            except CaseError:
                return  # the publish or rollback itself says what is wrong
            proof_against_active(session, source)

    def rollback(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        """`rollback vN` shows what it would change (as `publish DRAFT` does) and the hash of
        exactly that change; `rollback vN confirm HASH` does it (or asks a second lead, or
        confirms another lead's request for the same hash)."""
        confirmed = len(rest) in (2, 3) and rest[1].lower() == "confirm"
        if not rest or (len(rest) > 1 and not confirmed):
            raise usage("rollback vN [confirm HASH]")
        version = drafts.parse_ref(rest[0], allow=("version",)).number
        self._prove_ahead(drafts.Ref("version", version))
        if len(rest) != 3:
            with self.desk.db.read() as session:
                drafts.require_lead(session, user, self.desk.directory)
                shown = policy_admin.preview_rollback(session, version=version, asker=user)
            if confirmed:  # a rollback is confirmed with the hash of what its giver saw
                return Reply(lines(text("Not rolled back: confirm with the hash below."), shown))
            return Reply(shown)
        return self._change(
            user,
            lambda s, a: policy_admin.rollback(
                s, self.desk.audit, version=version, actor=a, confirm=rest[2]
            ),
            doctor=True,
        )

    def mode(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        if len(rest) != 1:
            raise usage("mode shadow|approve-all|supervised")
        return self._change(
            user, lambda s, a: policy_admin.set_mode(s, self.desk.audit, mode=rest[0], actor=a)
        )

    def pause(self, user: str, channel: str | None, rest: list[str], paused: bool = True) -> Reply:
        return self._change(
            user,
            lambda s, a: policy_admin.set_paused(
                s, self.desk.audit, paused=paused, actor=a, now=self.desk.now()
            ),
        )

    def resume(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        return self.pause(user, channel, rest, paused=False)

    def review_rate(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        if len(rest) != 1:
            raise usage("review-rate 5%|0.05|policy")
        rate = _rate(rest[0])
        return self._change(
            user, lambda s, a: policy_admin.set_review_rate(s, self.desk.audit, rate=rate, actor=a)
        )

    def second_lead(self, user: str, channel: str | None, rest: list[str]) -> Reply:
        if len(rest) != 1 or rest[0].lower() not in ("on", "off"):
            raise usage("second-lead on|off")
        on = rest[0].lower() == "on"
        return self._change(
            user, lambda s, a: policy_admin.set_second_lead(s, self.desk.audit, on=on, actor=a)
        )

    CHANGES: ClassVar[dict[str, Callable[[PolicyCommands, str, str | None, list[str]], Reply]]] = {
        "draft": draft,
        "test": test,
        "backtest": backtest,
        "shadow start": shadow_start,
        "shadow stop": shadow_stop,
        "publish": publish,
        "rollback": rollback,
        "mode": mode,
        "pause": pause,
        "resume": resume,
        "review-rate": review_rate,
        "second-lead": second_lead,
    }

    # ------------------------------------------------------------ modal and review buttons

    def submit_draft(self, user: str, meta: str, view: dict[str, Any]) -> Reply | dict[str, str]:
        """A submitted draft modal: errors for the modal, or the reply and the jobs to run."""
        draft_text, _, channel = meta.partition("|")
        draft_id = int(draft_text) if draft_text.isdigit() else None
        file_id, text = draft_submission(view)
        if (file_id is None) == (text is None):
            return {"file": "Upload the policy YAML file, or paste a short policy below (one)."}
        with self.desk.db.write() as session:
            drafts.require_lead(session, user, self.desk.directory)
            if file_id is not None:  # read by a job: no network call before ack()
                job = queue(
                    session,
                    kind=DRAFT_FILE_JOB,
                    payload={
                        "file": file_id,
                        "draft": draft_id,
                        "user": user,
                        "channel": channel or None,
                    },
                )
                return Reply("Reading the file…", [job])
            assert text is not None
            _, change = drafts.save_draft(
                session, self.desk.audit, source=text, actor=Actor("human", user), draft_id=draft_id
            )
            jobs: list[int | None] = [tell(session, user, channel or None, change.reply)]
            if change.announce:
                jobs.append(announce(session, self.default_channel, change.announce))
        return Reply(change.reply, jobs)

    def answer_review(self, user: str, case_id: str, verdict: str, where: dict[str, str]) -> Reply:
        with self.desk.db.write() as session:
            _check_reviewer(session, user, case_id, self.desk.directory)
            sample = review.answer(
                session,
                self.desk.audit,
                case_id=case_id,
                verdict=verdict,
                actor=Actor("human", user),
            )
            doc = (
                load_version(session, sample.policy_version).doc if sample.policy_version else None
            )
            rule = mrkdwn.render(rule_name(doc, sample.rule))
            said = "looks right" if verdict == "right" else f"was wrong (under {rule})"
            jobs: list[int | None] = []
            if where.get("channel") and where.get("ts"):
                jobs.append(
                    enqueue_call(
                        session,
                        "chat.update",
                        channel=where["channel"],
                        ts=where["ts"],
                        text="After-the-fact review answered",
                        blocks=review_blocks(sample, f"<@{user}>: {said}.", doc),
                    )
                )
            if verdict == "wrong":
                jobs.append(
                    announce(
                        session,
                        self.default_channel,
                        f":warning: <@{user}> marked case `{case_id}` as wrongly "
                        f"refunded under {rule} (v{sample.policy_version}).",
                    )
                )
        return Reply(f"Recorded: case `{case_id}` {said}.", jobs)


def _check_reviewer(session: Session, user: str, case_id: str, directory: Directory | None) -> None:
    """Approvers, managers and leads of the case's policy may judge its automatic refund."""
    sample = session.get(ReviewSample, case_id)
    if sample is None or sample.policy_version is None:
        return  # review.answer says what is wrong
    doc = load_version(session, sample.policy_version).doc
    allowed = (
        is_lead(doc, user, directory)
        or any(is_one_of(g, user, directory) for g in doc.approvers.values())
        or is_one_of(doc.managers, user, directory)
    )
    if not allowed:
        raise Refused("not_a_reviewer", "Only the policy's approvers, managers and leads review.")


def _one_draft(rest: list[str], text: str) -> int:
    if len(rest) != 1:
        raise usage(text)
    return drafts.parse_ref(rest[0], allow=("draft",)).number


def _rate(text: str) -> float | None:
    if text.lower() == "policy":
        return None
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise InvalidRequest("bad_rate", f"`{text}` is not a share like 5% or 0.05.") from None


def _draft_state(draft: Any) -> str:
    if draft.published_version is not None:
        return f"published as v{draft.published_version}"
    parts = ["valid" if draft.content_hash else "not valid"]
    if draft.last_test_summary:
        parts.append(f"tests: {draft.last_test_summary}")
    if draft.last_backtest_hash and draft.last_backtest_hash == draft.content_hash:
        parts.append(f"backtested {mrkdwn.when(draft.last_backtest_at)}")
    return ", ".join(parts)


def _heading(session: Session, ref: drafts.Ref) -> Text:
    """Which text is shown: a version with who published it, or a draft with its state."""
    if ref.kind == "version":
        row = session.get(PolicyVersion, ref.number)
        assert row is not None  # source_of found it
        return text(
            Strong(f"{row.policy_name} v{row.version}"),
            " (published by ",
            by_whom(row.published_by),
            f", {row.note}" if row.note else "",
            ", hash ",
            Code(row.content_hash[:12]),
            ")",
        )
    draft = drafts.get_draft(session, ref.number)
    return text(
        Strong(f"Draft d{draft.id}"), " by ", by_whom(draft.author), f", {_draft_state(draft)}"
    )


def register(surface: Surface) -> None:
    app, desk = surface.app, surface.desk
    commands = PolicyCommands(desk, surface.outbox.default_channel)

    @app.command("/refund-policy")
    async def on_policy(ack: Any, command: dict[str, Any], client: Any) -> None:
        user, channel = command["user_id"], command.get("channel_id")
        reply = await surface.blocking(commands.run, user, channel, command.get("text") or "")
        if reply.modal_for is not None:
            view = draft_modal(reply.modal_for[0], channel or "")
            await client.views_open(trigger_id=command["trigger_id"], view=view)
            await ack()
            return
        await ack(text=reply.text)
        surface.start_jobs(reply.jobs)

    @app.view(DRAFT_MODAL)
    async def on_draft(ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        user = body["user"]["id"]
        try:
            reply = await surface.blocking(
                commands.submit_draft, user, view.get("private_metadata") or "", view
            )
        except CaseError as exc:
            await ack(response_action="errors", errors={"source": exc.message})
            return
        if isinstance(reply, dict):
            await ack(response_action="errors", errors=reply)
            return
        await ack()
        surface.start_jobs(reply.jobs)

    async def on_review(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        user = body["user"]["id"]
        verdict = "right" if action["action_id"] == REVIEW_RIGHT else "wrong"
        where = {
            "channel": (body.get("channel") or {}).get("id", ""),
            "ts": (body.get("message") or body.get("container") or {}).get("ts", "")
            or (body.get("container") or {}).get("message_ts", ""),
        }
        try:
            reply = await surface.blocking(
                commands.answer_review, user, action["value"], verdict, where
            )
        except CaseError as exc:
            await ack()
            said = f":no_entry: {mrkdwn.render(exc.text)}"
            await tell_person(surface, where["channel"], user, said, body.get("response_url"))
            return
        await ack()
        surface.start_jobs(reply.jobs)

    app.action(REVIEW_RIGHT)(on_review)
    app.action(REVIEW_WRONG)(on_review)

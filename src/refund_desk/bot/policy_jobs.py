"""The slow parts of `/refund-policy`, run as jobs after the listener has acknowledged: a
backtest (recorded with its report job in one transaction, so a rate limit afterwards never runs
it again), a draft uploaded in the modal, an after-the-fact review. Every Slack call goes
through the outbox (a rate limit becomes a wait); no transaction is open while Slack is called.
"""

from __future__ import annotations

import io
import logging
import time
import urllib.request
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from sqlalchemy import select
from sqlmodel import Session, col

from refund_desk.bot import mrkdwn
from refund_desk.bot.blocks.policy import review_blocks
from refund_desk.bot.outbox import Outbox, active_doc, enqueue_call, enqueue_tell, run_now
from refund_desk.cases.desk import Desk
from refund_desk.cases.errors import CaseError
from refund_desk.governance.backtest import record_backtest, run_backtest
from refund_desk.governance.drafts import (
    MAX_SOURCE,
    compiled,
    parse_ref,
    require_lead,
    save_draft,
    source_of,
)
from refund_desk.governance.proof import proof_against_active, proof_summary
from refund_desk.governance.versions import load_version
from refund_desk.jobs.queue import ClaimedJob, RetryLater, queue
from refund_desk.policy import policy_hash
from refund_desk.storage.audit import Actor
from refund_desk.storage.models import Case, ReviewSample, SlackMessage
from refund_desk.text import Text, lines, text

log = logging.getLogger(__name__)
BACKTEST_JOB = "policy.backtest"
BACKTEST_REPORT_JOB = "policy.backtest_report"
DRAFT_FILE_JOB = "policy.draft_file"
PROGRESS_AFTER = 2.0  # seconds before a running backtest shows a progress message
PROGRESS_EVERY = 3.0
# files_upload_v2 calls these (the manifest test reads the scopes from the method names).
UPLOAD_METHODS = ("files.getUploadURLExternal", "files.completeUploadExternal")
MAX_MESSAGE = 3500


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def policy_channel(session: Session, default: str | None) -> str | None:
    """The active policy's ``channels.policy``, else the deployment's channel."""
    doc = active_doc(session)
    return (doc.channels.get("policy") if doc else None) or default


def announce(session: Session, default: str | None, said: Text | str) -> int | None:
    """Queue a message to the policy channel in the caller's transaction (the change's).

    A ``Text`` is rendered here; a ``str`` is mrkdwn the bot wrote itself."""
    channel = policy_channel(session, default)
    if channel is None:
        return None
    body = clip(mrkdwn.render(said))
    return enqueue_call(session, "chat.postMessage", channel=channel, text=body)


def tell(session: Session, user: str, channel: str | None, said: Text | str) -> int:
    """Queue a reply only ``user`` sees (an ephemeral in ``channel``, else a DM)."""
    return enqueue_tell(session, user, clip(mrkdwn.render(said)), channel=channel)


@dataclass
class PolicyJobs:
    desk: Desk
    outbox: Outbox

    # ------------------------------------------------------------ backtest

    def backtest(self, job: ClaimedJob) -> None:
        p = job.payload
        ref, days, channel = parse_ref(p["ref"]), int(p["days"]), p["channel"]
        actor = Actor("human", p["user"])
        with self.desk.db.read() as session:
            source = source_of(session, ref)
        if policy_hash(source) != p["content_hash"]:
            self.outbox.call(
                "chat.postMessage",
                channel=channel,
                text=(
                    f"{ref} changed after the backtest was asked for; run `backtest {ref}` again."
                ),
            )
            return
        progress = Progress(self.outbox, channel, f"Backtesting {ref} over the last {days} days")
        out = io.StringIO()
        run = run_backtest(
            self.desk.db,
            compiled(p["content_hash"], source),
            label=str(ref),
            days=days,
            now=self.desk.now(),
            csv_out=out,
            progress=progress,
        )
        said = run.text
        if ref.kind == "draft":  # beside the backtest: what the draft loosens, proved
            with self.desk.db.read() as session:
                proved = proof_against_active(session, source)
                active = load_version(session, proved[0]).doc if proved is not None else None
            if proved is not None and active is not None and run.doc is not None:
                said = lines(said, proof_summary(*proved, (active, run.doc)))
        with self.desk.db.write() as session:  # the run and its report: one transaction
            record_backtest(
                session,
                self.desk.audit,
                run,
                actor=actor,
                draft_id=ref.number if ref.kind == "draft" else None,
            )
            report = queue(
                session,
                kind=BACKTEST_REPORT_JOB,
                payload={
                    "channel": channel,
                    "text": clip(mrkdwn.render(text(actor.who, ": ", said))),
                    "progress_ts": progress.ts,
                    "csv": out.getvalue(),
                    "filename": f"backtest-{ref}-{p['content_hash'][:8]}.csv",
                    "title": f"Backtest of {ref}: every changed case",
                },
            )
        self.desk.jobs.run_now(report)

    def backtest_report(self, job: ClaimedJob) -> None:
        """The summary (posted once: the job remembers its message), then the CSV in its thread;
        a rate limit on either resumes here, never in the backtest."""
        p = job.payload
        channel, key = p["channel"], f"backtest:{job.id}"
        with self.desk.db.read() as session:
            posted = session.scalars(
                select(SlackMessage).where(col(SlackMessage.case_id) == key)
            ).first()
        if posted is None:
            ts = p.get("progress_ts")
            if ts:
                self.outbox.call("chat.update", channel=channel, ts=ts, text=p["text"])
            else:
                ts = self.outbox.call("chat.postMessage", channel=channel, text=p["text"])["ts"]
            with self.desk.db.write() as session:
                session.add(SlackMessage(case_id=key, kind="report", channel=channel, ts=str(ts)))
        else:
            ts = posted.ts
        try:
            self.outbox.client.files_upload_v2(
                channel=channel,
                content=p["csv"],
                filename=p["filename"],
                title=p["title"],
                thread_ts=str(ts),
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                delay = float(exc.response.headers.get("Retry-After", "1"))
                raise RetryLater(delay, "slack rate limited the upload", failed=False) from None
            raise

    # ------------------------------------------------------------ a draft uploaded as a file

    def draft_file(self, job: ClaimedJob) -> None:
        p = job.payload
        user, channel = p["user"], p.get("channel")
        try:
            source = self._download(p["file"])
            self.outbox.directory.refresh()
            with self.desk.db.write() as session:
                # still a lead when the file arrives
                require_lead(session, user, self.outbox.directory)
                _, change = save_draft(
                    session,
                    self.desk.audit,
                    source=source,
                    actor=Actor("human", user),
                    draft_id=p.get("draft"),
                )
                jobs: list[int | None] = [tell(session, user, channel, change.reply)]
                if change.announce:
                    jobs.append(announce(session, self.outbox.default_channel, change.announce))
        except CaseError as exc:
            with self.desk.db.write() as session:
                said = f":no_entry: Draft not saved: {mrkdwn.render(exc.text)}"
                jobs = [tell(session, user, channel, said)]
        run_now(self.desk, jobs)

    def _download(self, file_id: str) -> str:
        try:
            info = self.outbox.call("files.info", file=file_id)["file"]
        except SlackApiError as exc:  # the lead hears why, instead of "Reading the file…" forever
            error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            raise CaseError(
                "file_unreadable", f"Slack would not show the file ({error or 'no answer'})."
            ) from None
        if int(info.get("size") or 0) > MAX_SOURCE:
            raise CaseError("policy_too_long", f"The file is over {MAX_SOURCE:,} bytes.")
        request = urllib.request.Request(
            info["url_private"], headers={"Authorization": f"Bearer {self.outbox.client.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                data: bytes = response.read(MAX_SOURCE + 1)
        except OSError as exc:  # URLError and timeouts
            reason = f"The file could not be downloaded ({exc})."
            raise CaseError("file_unreadable", reason) from None
        if len(data) > MAX_SOURCE:
            raise CaseError("policy_too_long", f"The file is over {MAX_SOURCE:,} bytes.")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise CaseError("not_text", "The file is not UTF-8 text (a YAML file).") from None

    # ------------------------------------------------------------ after-the-fact review

    def review(self, job: ClaimedJob) -> None:
        case_id = job.payload["case_id"]
        with self.desk.db.read() as session:
            sample = session.get(ReviewSample, case_id)
            case = session.get(Case, case_id)
            policy = (
                load_version(session, case.policy_version) if case and case.policy_version else None
            )
        if sample is None or sample.answer is not None:
            return
        channels = policy.doc.channels if policy else {}  # `review`, else the policy channel
        channel = channels.get("review") or channels.get("policy") or self.outbox.default_channel
        if channel is None:
            return
        self.outbox.call(
            "chat.postMessage",
            channel=channel,
            blocks=review_blocks(sample, doc=policy.doc if policy else None),
            text=f"After-the-fact review of case {case_id}",
        )


class Progress:
    """Shows a progress message only once a backtest runs for long, then keeps it current."""

    def __init__(
        self,
        outbox: Outbox,
        channel: str,
        label: str,
        *,
        after: float = PROGRESS_AFTER,
        every: float = PROGRESS_EVERY,
    ) -> None:
        self.outbox, self.channel, self.label = outbox, channel, label
        self.after, self.every = after, every
        self.started = self.last = time.monotonic()
        self.ts: str | None = None

    def __call__(self, cases: int) -> None:
        now = time.monotonic()
        if now - self.started < self.after or (self.ts and now - self.last < self.every):
            return
        text = f":hourglass_flowing_sand: {self.label}: {cases:,} cases so far…"
        try:
            self.finish(text)
        except (RetryLater, SlackApiError) as exc:  # progress is a courtesy: the run goes on
            log.info("backtest progress not shown: %s", exc)
        self.last = now

    def finish(self, text: str) -> str:
        """`text` replaces the progress message (or is posted as it); returns its ts."""
        if self.ts is None:
            posted = self.outbox.call("chat.postMessage", channel=self.channel, text=text)
            self.ts = str(posted["ts"])
        else:
            self.outbox.call("chat.update", channel=self.channel, ts=self.ts, text=text)
        return self.ts

"""`refund-desk slack doctor`: the workspace checked against the policy, one line per check with
its fix. The server runs the same checks at start-up and after each publish (the `slack.doctor`
job), logs them and DMs the leads about a failing one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from refund_desk.bot.outbox import active_doc, enqueue_once, run_now
from refund_desk.jobs.queue import ClaimedJob, queue
from refund_desk.policy.schema import PolicyDocument, usergroups
from refund_desk.settings import Settings

if TYPE_CHECKING:
    from refund_desk.bot.app import Surface

log = logging.getLogger(__name__)
DOCTOR_JOB = "slack.doctor"
# What the app calls needs these bot scopes (manifest.yml asks for exactly these).
REQUIRED_SCOPES = (
    "chat:write",
    "commands",
    "files:read",
    "files:write",
    "usergroups:read",
    "channels:read",
    "groups:read",
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        fix = f" (fix: {self.fix})" if not self.ok and self.fix else ""
        return f"{mark} {self.name}: {self.detail}{fix}"


def policy_channels(doc: PolicyDocument | None, default: str | None) -> dict[str, str]:
    """channel id -> what the policy uses it for."""
    named: dict[str, str] = {}
    if doc is not None:
        for purpose, channel in doc.channels.items():
            named.setdefault(channel, f"channels.{purpose}")
        for group, people in doc.approvers.items():
            if people.channel:
                named.setdefault(people.channel, f"approvers.{group}.channel")
    if default:
        named.setdefault(default, "REFUND_DESK_CHANNEL")
    return named


def _error(exc: SlackApiError) -> str:
    return str(exc.response.get("error")) if isinstance(exc.response.data, dict) else "no answer"


def run_checks(settings: Settings, doc: PolicyDocument | None) -> list[Check]:
    """Every check, in order; later checks are skipped (failed) when the token does not work."""
    if settings.slack_app_token is not None:
        checks = [Check("socket mode", True, "SLACK_APP_TOKEN is set")]
    elif settings.slack_signing_secret is not None:
        checks = [Check("signing secret", True, "SLACK_SIGNING_SECRET is set (HTTP)")]
    else:
        neither = "neither SLACK_SIGNING_SECRET (HTTP) nor SLACK_APP_TOKEN (Socket Mode) is set"
        fix = (
            "copy the Signing Secret from Basic Information into SLACK_SIGNING_SECRET, or "
            "an app-level token with connections:write into SLACK_APP_TOKEN"
        )
        checks = [Check("signing secret", False, neither, fix)]
    if settings.slack_bot_token is None:
        fix = "Install App in the app's settings and copy the Bot User OAuth Token (xoxb-…)"
        return [*checks, Check("token", False, "SLACK_BOT_TOKEN is not set", fix)]
    client = WebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        timeout=10,
    )
    try:
        auth = client.auth_test()
    except SlackApiError as exc:
        fix = "reinstall the app and copy its current Bot User OAuth Token"
        return [*checks, Check("token", False, f"auth.test answered {_error(exc)}", fix)]
    except OSError as exc:
        fix = "check SLACK_API_URL and the network"
        return [*checks, Check("token", False, f"Slack could not be reached ({exc})", fix)]
    checks.append(Check("token", True, f"works for {auth.get('team')} as {auth.get('user')}"))
    granted = {s.strip() for s in str(auth.headers.get("x-oauth-scopes", "")).split(",")}
    missing = [s for s in REQUIRED_SCOPES if s not in granted]
    said = f"missing {', '.join(missing)}" if missing else "granted scopes cover what the app calls"
    fix = "update the app from manifest.yml (OAuth & Permissions) and reinstall it"
    checks.append(Check("scopes", not missing, said, fix))
    for channel, purpose in policy_channels(doc, settings.channel).items():
        checks.append(_channel_check(client, channel, purpose))
    checks += [_group_check(client, group) for group in sorted(usergroups(doc) if doc else [])]
    return checks


def _channel_check(client: WebClient, channel: str, purpose: str) -> Check:
    name = f"channel {channel} ({purpose})"
    try:
        info: dict[str, Any] = client.conversations_info(channel=channel)["channel"]
    except SlackApiError as exc:
        fix = (
            "the channel does not exist or is private without the bot: invite the bot, or "
            "name another channel in the policy"
        )
        return Check(name, False, f"conversations.info answered {_error(exc)}", fix)
    if info.get("is_archived"):
        return Check(name, False, "archived", "unarchive it or name another channel")
    if not info.get("is_member"):
        return Check(
            name, False, "the bot is not a member", f"/invite @Refund Desk in <#{channel}>"
        )
    return Check(name, True, f"the bot is a member of #{info.get('name', channel)}")


def _group_check(client: WebClient, group: str) -> Check:
    name = f"user group {group}"
    try:
        users = client.usergroups_users_list(usergroup=group).get("users") or []
    except SlackApiError as exc:
        fix = "create the group in Slack (People → User groups) or fix the policy's usergroup"
        return Check(name, False, f"usergroups.users.list answered {_error(exc)}", fix)
    return Check(name, True, f"exists with {len(users)} members")


def queue_doctor(surface: Surface, reason: str) -> int:
    with surface.desk.db.write() as session:
        return queue(session, kind=DOCTOR_JOB, payload={"reason": reason})


def doctor_job(surface: Surface, job: ClaimedJob) -> None:
    """The checks, logged; each failing one is sent to the leads as a DM (once per job)."""
    with surface.desk.db.read() as session:
        doc = active_doc(session)
    checks = run_checks(surface.settings, doc)
    for check in checks:
        (log.info if check.ok else log.warning)(
            "slack doctor (%s): %s", job.payload.get("reason"), check.line()
        )
    failing = [c for c in checks if not c.ok]
    if not failing or doc is None:
        return
    leads = surface.directory.people(list(doc.leads))
    text = ":stethoscope: `refund-desk slack doctor` found a problem:\n" + "\n".join(
        f"• {c.line()}" for c in failing
    )
    with surface.desk.db.write() as session:
        ids = [
            enqueue_once(
                session,
                f"slack.doctor:{job.id}:{lead}",
                "chat.postMessage",
                channel=lead,
                text=text,
            )
            for lead in leads
        ]
    run_now(surface.desk, ids)

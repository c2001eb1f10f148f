"""Who someone is in the policy: a person named by id, or a member of a Slack user group.

A group's people come from the directory (the `Directory` port), so someone removed from the
group can no longer act, even on cases opened before. The directory answers from readings at
most 60 seconds old and never calls out itself (no network call inside a transaction); a group
it cannot vouch for counts as nobody.
"""

from __future__ import annotations

from typing import Protocol

from refund_desk.policy.schema import People, PolicyDocument


class DirectoryUnavailable(Exception):
    """The directory could not say who is in a user group just now."""


class Directory(Protocol):
    def members(self, usergroup: str) -> frozenset[str]:
        """The user ids in `usergroup`, as read at most 60 seconds ago; raises
        `DirectoryUnavailable` when it has no such reading."""


def in_usergroup(usergroup: str, user: str, directory: Directory | None) -> bool:
    if directory is None:
        return False
    try:
        return user in directory.members(usergroup)
    except DirectoryUnavailable:
        return False


def is_one_of(people: People | None, user: str, directory: Directory | None) -> bool:
    """Whether `user` is among `people`: named, or in their user group now."""
    if people is None:
        return False
    if user in people.members:
        return True
    return people.usergroup is not None and in_usergroup(people.usergroup, user, directory)


def is_lead(doc: PolicyDocument, user: str, directory: Directory | None) -> bool:
    return user in doc.leads or any(
        in_usergroup(lead, user, directory) for lead in doc.leads if lead.startswith("S")
    )


def roles(doc: PolicyDocument, user: str, directory: Directory | None) -> list[str]:
    """What ``user`` is under the policy, in words ("lead", "finance approver", "manager",
    "operator", "viewer"): the one answer for the words a surface shows beside a person and for
    what they may read (`may_read`). Empty: the policy names them nowhere. A viewer reads
    everything and decides nothing: no approver group, manager or lead list names them."""
    found = ["lead"] if is_lead(doc, user, directory) else []
    found += [
        f"{name} approver"
        for name, group in doc.approvers.items()
        if is_one_of(group, user, directory)
    ]
    if is_one_of(doc.managers, user, directory):
        found.append("manager")
    if is_one_of(doc.operators, user, directory):
        found.append("operator")
    if is_one_of(doc.viewers, user, directory):
        found.append("viewer")
    return found


def reads_only(doc: PolicyDocument, user: str, directory: Directory | None) -> bool:
    """Whether the policy makes ``user`` a viewer and nothing else: they read, never act (no
    decision, no proposal for an assistant)."""
    return roles(doc, user, directory) == ["viewer"]


def may_read(doc: PolicyDocument, user: str, directory: Directory | None) -> bool:
    """Case details, the policy text, counterfactuals and history are for the leads, the
    approvers, the managers and the policy's operators and viewers: whoever has a role
    (`roles`)."""
    return bool(roles(doc, user, directory))

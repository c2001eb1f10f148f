"""`refund-desk demo` in its own process prints where to go so that a new user finds it: the
addresses once it listens, again as the last lines once the sample stream is worked through
(the sandbox page's reads every second do not scroll them away), and once more when it stops;
the payment and email it prints to try `/refund` with exist, with money left on them; and the
README's first screen shows what it prints."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from refund_desk.demo.runner import TRY_COMMAND, TRY_EMAIL, TRY_PAYMENT, Where
from tests.demo.demo_process import Demo

README = Path(__file__).parents[2] / "README.md"
READY = "Refund Desk demo: the sample requests are in; open "
STOPPED = "Refund Desk demo stopped"


def printed_after(demo: Demo, words: str, timeout: float = 90) -> str:
    """What the demo printed from the last `words` on, once it has printed them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = demo.log.read_text()
        if words in log:
            return log[log.rindex(words) :]
        time.sleep(0.2)
    raise AssertionError(f"the demo never printed {words!r}: {demo.log.read_text()[-3000:]}")


@pytest.mark.slow
def test_the_addresses_come_last_and_again_when_the_demo_stops(tmp_path: Path) -> None:
    demo = Demo(tmp_path / "data", stream_seconds=3)
    try:
        printed_after(demo, READY)
        for _ in range(3):  # the sandbox page, open in a browser, reads its state every second
            demo.state()
        time.sleep(1)
        last = printed_after(demo, READY)
        assert last.splitlines() == [
            f"{READY}{demo.base}/sandbox/",
            f"  Slack sandbox:  {demo.base}/sandbox/   (pick who you are under Acting as)",
            f"  web desk:       {demo.base}/desk   (sign in with the sandbox's Slack as anyone)",
            f"  customer form:  {demo.base}/request",
            f"  API docs:       {demo.base}/docs",
            f"  try, as Olivia in the sandbox:  {TRY_COMMAND}",
            f"  data in {demo.dir} (kept: --dir {demo.dir} again resumes it)",
            "  press Ctrl+C to stop",
        ], last
        shown = demo.cli("sandbox", "payment", "show", TRY_PAYMENT)
        assert shown.returncode == 0, shown.stderr
        payment = json.loads(shown.stdout)
        assert (payment["email"], payment["amount"], payment["refunds"]) == (TRY_EMAIL, 4000, [])
    finally:
        demo.stop()
    goodbye = printed_after(demo, STOPPED, timeout=5)
    assert f"its data is kept in {demo.dir}" in goodbye
    assert f"  Slack sandbox:  {demo.base}/sandbox/" in goodbye
    assert f"  web desk:       {demo.base}/desk" in goodbye
    assert f"  try, as Olivia in the sandbox:  {TRY_COMMAND}" in goodbye


def test_the_readmes_first_screen_is_what_the_demo_prints_and_what_to_try() -> None:
    first_screen = README.read_text().split("### What you see")[0]
    assert "./dev demo" in first_screen and "./dev test" in first_screen
    assert "many minutes" in first_screen
    assert "requirements.lock" not in first_screen and "./dev lock" not in first_screen
    printed = Where("http://127.0.0.1:8000", Path("/tmp/refund-desk-demo-…"), True).ready()
    shown = re.search(r"```text\n(.*?)```", first_screen, re.S)
    assert shown and shown[1] == printed, shown
    assert f"`{TRY_COMMAND}`" in first_screen  # what to type, as the demo prints it
    assert f"Payment `{TRY_PAYMENT}`" in first_screen and f"`{TRY_EMAIL}`" in first_screen

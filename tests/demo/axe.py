"""axe-core (the npm package, installed by `./dev test` beside the venv) run on a page in the
browser: every page of the desk must come out with no violation.

The script is evaluated through the browser's DevTools protocol, so the page's own strict
Content-Security-Policy (no inline script) stays on while it is checked."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(os.environ.get("REFUND_DESK_AXE", ROOT / ".venv/axe/node_modules/axe-core/axe.min.js"))


def axe_source() -> str:
    if not AXE.is_file():
        pytest.skip(f"axe-core is not installed at {AXE} (./dev test installs it with npm)")
    return AXE.read_text()


def violations(page: Any) -> list[dict[str, Any]]:
    """axe's violations on the page as it is now (WCAG 2.1 A and AA, and best practices)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(axe_source())
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))"""
    )
    return list(found)


def assert_accessible(page: Any, where: str) -> None:
    found = violations(page)
    assert not found, f"axe-core on {where}: " + "; ".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}" for v in found
    )

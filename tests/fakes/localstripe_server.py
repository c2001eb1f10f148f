"""Run localstripe (from PyPI) on loopback only, with its state file in a folder we choose.

localstripe's own entry point (`localstripe.server:start`) binds every interface and keeps its
state in a fixed file under /tmp; this launcher runs the same aiohttp app from that module,
bound to 127.0.0.1, and points the state file into the given folder.

    python -m tests.fakes.localstripe_server PORT STATE_DIR
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main(port: int, state_dir: Path) -> None:
    from aiohttp import web
    from localstripe import resources, server

    state = state_dir / "localstripe.pickle"

    def dump_to_disk(store: resources.Store) -> None:
        with state.open("wb") as f:
            pickle.dump(dict(store), f, protocol=pickle.HIGHEST_PROTOCOL)

    def try_load_from_disk(store: resources.Store) -> None:
        if state.exists():
            with state.open("rb") as f:
                dict.update(store, pickle.load(f))

    resources.Store.dump_to_disk = dump_to_disk  # type: ignore[method-assign]
    resources.Store.try_load_from_disk = try_load_from_disk  # type: ignore[method-assign]
    web.run_app(server.app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))

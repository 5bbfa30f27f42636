"""``dprivacy serve`` builds what the application builds on its first request before its socket
listens (:func:`dprivacy.service.serve.warm_up`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import uvicorn

from dprivacy.service.app import create_app, stamped_protocol
from dprivacy.service.serve import warm_up


def test_warm_up_answers_the_health_check_through_the_whole_stack(start: Callable[..., Any]):
    svc = start()
    app = create_app(svc.runner.cfg, runner=svc.runner)
    assert app.middleware_stack is None  # built on the first request
    config = uvicorn.Config(app, log_level="warning", http=stamped_protocol())
    config.load()
    assert warm_up(config.loaded_app) == 200
    assert app.middleware_stack is not None


def test_the_short_slice_is_granted_to_the_calling_thread_only():
    import sys
    import threading

    from dprivacy.service.slices import SHORT_SLICE_NS, current_slice, set_slice

    before = current_slice()
    got: dict[str, object] = {}

    def run() -> None:
        got["granted"] = set_slice()
        got["slice"] = current_slice()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert current_slice() == before  # this thread's own slice is untouched
    if sys.platform.startswith("linux") and before is not None and before > 0:
        # a kernel with EEVDF slices (it reports the default slice): the request is honoured
        assert got == {"granted": True, "slice": SHORT_SLICE_NS}
    else:
        assert got["granted"] is False

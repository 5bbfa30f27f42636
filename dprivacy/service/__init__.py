"""``dprivacy serve``: protected tables served to remote analysts (the data owner's side).

The analyst's code no longer runs in the data owner's process: analysts send data-free JSON
plans (:mod:`.plan`, :mod:`.exprcodec`) over authenticated HTTP (:mod:`.auth`, :mod:`.app`); the
service holds the sources, the engine and every budget (:mod:`.sources`), and releases each
answer at a deadline fixed from public facts (:mod:`.runner`). The client is
:mod:`dprivacy.remote`. Configuration: :mod:`.config`.
"""

from dprivacy.service.auth import key_sha256, new_key
from dprivacy.service.config import ServiceConfig, load_config

__all__ = ["load_config", "ServiceConfig", "key_sha256", "new_key", "create_app"]


def create_app(cfg: ServiceConfig) -> object:
    """The FastAPI application for ``cfg`` (see :func:`dprivacy.service.app.create_app`)."""
    from dprivacy.service.app import create_app as _create

    return _create(cfg)

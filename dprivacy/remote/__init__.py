"""Analysts' side of ``dprivacy serve``: protected tables held by a remote data owner.

>>> from dprivacy.remote import connect          # doctest: +SKIP
>>> s = connect("http://127.0.0.1:8765", key="...")  # doctest: +SKIP
>>> t = s.table("people")                          # doctest: +SKIP
>>> t.where(ibis._.age > 40).noisy_count(0.5)      # doctest: +SKIP

A remote table has the methods of :class:`~dprivacy.tables.Queryable` or
:class:`~dprivacy.tables.ProPerTable`; they take row-wise Ibis expressions (``ibis._.age > 40``,
``lambda t: t.age // 10``) or column names, which are resolved on the public schema and sent as a
data-free JSON plan (see the service documentation). No Python function and no pickled object is
sent; the records, the engine and every budget stay with the service.
"""

from dprivacy.remote.session import (
    AccessDeniedError,
    AuthenticationError,
    ServiceBusyError,
    ServiceError,
    Session,
    connect,
)
from dprivacy.remote.table import RemoteGrouped, RemoteTable

__all__ = ["connect", "Session", "RemoteTable", "RemoteGrouped", "ServiceError",
           "AuthenticationError", "AccessDeniedError", "ServiceBusyError"]

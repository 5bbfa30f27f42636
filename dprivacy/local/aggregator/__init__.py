"""The aggregator's side of the local model over HTTP: the server that publishes queries and
collects replies (:mod:`.server`, FastAPI), its durable state and credentials (:mod:`.store`,
SQLite), the checks of a reply (:mod:`.replies`), the body-size cap (:mod:`.middleware`) and the
client functions both sides use (:mod:`.client`).

Nothing is imported here (FastAPI and httpx are loaded only by the modules that need them).
"""

"""The analysts' API keys of the service tests (a module of its own so that the fixtures and
the conftest can both import it without a circle)."""

KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-9876543210"}

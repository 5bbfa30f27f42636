"""Where the tables' budgets live: the ledger protocol and every budget store.

* :mod:`.ledger`: the :class:`~dprivacy.tables.budgets.ledger.BudgetLedger` protocol, exact
  integer budget units and the durable SQLite :class:`~dprivacy.tables.budgets.ledger.Ledger`;
* :mod:`.memory_ledger`: the in-memory store;
* :mod:`.budget_table` (with :mod:`.engine_costs`): personal budgets in an engine table, charged
  set-based;
* :mod:`.spark_budgets` (with :mod:`.version_log`): personal budgets held in a Spark cluster's
  storage, a versioned Parquet table with atomic commits;
* :mod:`.proper_budgets`: ProPer's personal budgets over a ledger;
* :mod:`.agents` and :mod:`.durable`: PINQ's budget agents (in memory, or backed by a ledger).

Nothing is imported here, so a process that only needs the ledger loads nothing else.
"""

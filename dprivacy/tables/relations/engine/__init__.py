"""Tables on engines: analyst transformations as row-wise Ibis expressions, run where the data
lives (DuckDB for frames, Parquet files and DuckDB tables; Spark beyond one machine).

* :mod:`.rowwise`: the allow-list checker and totality rewrite of analyst expressions;
* :class:`IbisRelation` (:mod:`.relation`): a lazy plan with a hidden privacy-id column, its
  aggregates (:mod:`.aggregates`) and set operations (:mod:`.setops`) on the engine's tables;
* :func:`relation_from` (:mod:`.sources`): protected records from frames, Parquet, DuckDB, Spark;
* :func:`local_session` (:mod:`.spark`): a local SparkSession for tests and examples.

Personal budgets on an engine live with the other budget stores:
:class:`~dprivacy.tables.budgets.budget_table.BudgetTable` and
:func:`~dprivacy.tables.budgets.engine_budgets.proper_budgets`.
"""

from dprivacy.tables.relations.engine.relation import PID, IbisRelation
from dprivacy.tables.relations.engine.rowwise import NotRowwiseError
from dprivacy.tables.relations.engine.sources import infer_backend, relation_from
from dprivacy.tables.relations.engine.spark import local_session

__all__ = ["IbisRelation", "PID", "NotRowwiseError", "relation_from", "infer_backend", "local_session"]

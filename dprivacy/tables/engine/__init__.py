"""Tables on engines: analyst transformations as row-wise Ibis expressions, run where the data
lives (DuckDB for frames, Parquet files and DuckDB tables; Spark beyond one machine).

* :mod:`.rowwise`: the allow-list checker and totality rewrite of analyst expressions;
* :class:`IbisRelation` (:mod:`.relation`): a lazy plan with a hidden privacy-id column;
* :func:`relation_from` / :func:`proper_budgets` (:mod:`.sources`): sources and ProPer ids;
* :class:`BudgetTable` (:mod:`.budget_table`): personal budgets charged set-based, durable;
* :func:`local_session` (:mod:`.spark`): a local SparkSession for tests and examples.
"""

from dprivacy.tables.engine.budget_table import BudgetTable, LedgerLockTimeout
from dprivacy.tables.engine.relation import PID, IbisRelation
from dprivacy.tables.engine.rowwise import NotRowwiseError
from dprivacy.tables.engine.sources import infer_backend, proper_budgets, relation_from
from dprivacy.tables.engine.spark import local_session

__all__ = ["IbisRelation", "PID", "BudgetTable", "LedgerLockTimeout", "NotRowwiseError",
           "relation_from", "proper_budgets", "infer_backend", "local_session"]

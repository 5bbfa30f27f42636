"""Where a table's records live: the :class:`~dprivacy.tables.relations.protocol.Relation`
protocol and its implementations.

* :mod:`.protocol`: the protocol every backend implements (transformations, aggregates, ids);
* :mod:`.pandas_relation`: records in a pandas DataFrame; analyst code is a Python callable of
  one record, checked by :mod:`.rowwise`; :mod:`.multiset` gives ProPer's multiset semantics;
* :mod:`.engine`: records in DuckDB or Spark through Ibis; analyst code is a row-wise Ibis
  expression;
* :mod:`.dispatch`: which of the two holds a given input.

Nothing is imported here, so importing one module of this package does not load the others.
"""

"""What runs on the user's side: the agent that answers queries (:mod:`.agent`), the OS sandbox
for analyst code (:mod:`.sandbox`), the personal budget (:mod:`.budget`) and the public policy
that decides which queries are considered at all (:mod:`.policy`).

Nothing is imported here: the names are re-exported by :mod:`dprivacy.local`.
"""

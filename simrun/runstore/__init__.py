"""Runs, tasks, units and jobs in flight, in the service's SQLite file: the only SQL about
run state.

The tables form the component ``runs`` of the file (`simrun.db.migrate`); the learned
resources live in the same file (component ``resources``), so that the controller writes
unit states and observations in one transaction (`RunStore.transaction` and
`RunStore.apply_reports` with `simrun.resources.ResourceStore.record_many` on the same
connection).

* ``runs``: one row per submission, its state (`simrun.core.states.RunState`) and document.
* ``tasks``: one row per task of a run, its state and status message, the queue and the
  resources it was dispatched with, its number of units once counted.
* ``units``: one row per unit (index ≥ 0), per command of an unsplit task (index 0,
  kind ``command``) and per merge (index -1, kind ``merge``).
* ``jobs``: the jobs in flight (enqueued, not yet reported or released), which is what the
  dispatch window counts and what reconciliation compares with Redis.

Writes go through one connection guarded by a lock (a transaction never interleaves with
another coroutine's statements); reads use a second connection, which WAL lets see the last
committed state without waiting for the writer. Batches use ``executemany`` and ``IN``
lists, never one round trip per unit; a report whose units are all done is one update of
their index ranges (`simrun.runstore.ingest`, `simrun.runstore.apply`).
"""

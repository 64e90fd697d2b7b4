"""The service: the only writer of the SQLite file, the controller loop and the HTTP API.

`controller` owns the connections and runs one step after another: `ingest` (the
workers' reports), `liveness` (dead workers, abandoned and lost jobs), `advance` (tasks
and runs move on), `dispatch` (pending units become jobs, built by `packing`), `forget`
(the Redis state of ended runs). `queries` is the read side the API (`api`, one router per
resource) and the metrics (`metrics`, Prometheus families as data) use; `views` builds the
views of `simrun.core.views` from stored rows; `submit` turns a checked workflow into a
run; `decisions` holds the controller's own pure decisions; `main` runs it all.
"""

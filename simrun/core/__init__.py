"""The neutral core: what the service and the workers both speak, and the rules both apply.

It imports nothing of simrun but `simrun.plugins`, so every other package may use it:

* the wire: `wire` (the words, the field types, the msgpack codec), `jobs` (the job
  payload), `reports` (what a worker reports: `WorkerReport`, the stream entry, the
  heartbeat with its running jobs), `views` (what the HTTP API sends of runs);
* the rules: `states` (the state machines of runs, tasks and units, and their named sets),
  `sizing` (queue, memory request, chunk size, retry memory, "fits no worker"),
  `scaling` (how many worker containers a queue wants), `timing` (heartbeat defaults);
* the places: `layout` (where the files of a store live) and `clock` (the time, injected).
"""

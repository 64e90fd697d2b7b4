"""The neutral core: what the service and the workers both speak, and the rules both apply.

It imports nothing of simrun but `simrun.plugins`: the wire types (`jobs`, `reports`,
`wire`), the state machines of runs, tasks and units (`states`), the sizing rules
(`sizing`), the timing defaults (`timing`), the layout of a store (`layout`) and the pure
scaling decision (`scaling`).
"""

"""Redis as simrun uses it: every key and queue name (`Keys`), the per-unit current
attempts the service writes and the workers read, and `JobQueue`, the thin layer over arq
the service uses to enqueue, watch queues, drop jobs, list live workers and read reports.
arq is imported here and in the worker's setup only. The wire types themselves live in
`simrun.core`.
"""

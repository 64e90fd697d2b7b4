"""The service: the only writer of the SQLite file, the controller loop and the HTTP API
(`controller` drives the steps of `ingest`, `liveness`, `advance`, `dispatch`, `forget`;
`queries` is the read side of the API and `metrics`; `main` runs it all).
"""

"""The service: the controller loop (its steps a module each), the HTTP API and its read
side (`queries`)."""

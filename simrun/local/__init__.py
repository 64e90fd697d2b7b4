"""Embedded mode: what ``simrun run`` starts on one machine — a private Redis (`redis`),
the service in-process and worker subprocesses (`session`), and the guard that cleans up
if ``simrun run`` itself dies (`guard`); `machine` says what this machine offers."""

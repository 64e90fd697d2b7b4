"""The tables of the component ``runs`` of the service's SQLite file: the baseline, then
the migration steps that come after."""

from __future__ import annotations

from collections.abc import Iterable

from simrun import db
from simrun.core.states import RUN_STATES, TASK_STATES, UNIT_KINDS, UNIT_STATES

COMPONENT = "runs"


def sql_list(states: Iterable[str]) -> str:
    """The SQL list of some states, for ``state IN ...``: ``('queued', 'running')``; a set
    in sorted order, a sequence in its own. The states are the names of
    `simrun.core.states`, never input, so they are spelled inline."""
    ordered = sorted(states) if isinstance(states, set | frozenset) else list(states)
    return "(" + ", ".join(f"'{s}'" for s in ordered) + ")"


_RUN_CHECK = f"state IN {sql_list(RUN_STATES)}"
_TASK_CHECK = f"state IN {sql_list(TASK_STATES)}"

MIGRATIONS: tuple[db.Migration, ...] = (
    db.Migration(
        "runs, tasks, units (those with a row of their own), spans, jobs in flight, pauses",
        (
            "CREATE TABLE runs ("
            " id TEXT PRIMARY KEY,"
            " name TEXT,"
            " model TEXT NOT NULL,"
            f" state TEXT NOT NULL CHECK ({_RUN_CHECK}),"
            " message TEXT NOT NULL DEFAULT '',"
            " document TEXT NOT NULL,"  # the text as submitted
            " created_s REAL NOT NULL,"
            " updated_s REAL NOT NULL,"
            " finished_s REAL,"
            " image TEXT"  # where its tasks without an image of their own run (NULL: none)
            ")",
            "CREATE INDEX runs_by_state ON runs (state, created_s)",
            "CREATE TABLE tasks ("
            " run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,"
            " name TEXT NOT NULL,"
            " position INTEGER NOT NULL,"  # in topological order
            " type TEXT NOT NULL,"
            " settings TEXT NOT NULL,"  # JSON, as validated
            " inputs TEXT NOT NULL,"  # JSON {port: path}
            " depends TEXT NOT NULL,"  # JSON [task]
            " override TEXT,"  # JSON of the workflow's ResourceOverride
            " memory_override_gb REAL,"  # from a replay
            " retry TEXT,"  # JSON of its retry fields; NULL: the service's defaults
            " staged TEXT,"  # JSON list of the input ports staged into local scratch
            " splittable INTEGER NOT NULL CHECK (splittable IN (0, 1)),"
            " has_merge INTEGER NOT NULL CHECK (has_merge IN (0, 1)),"
            f" state TEXT NOT NULL CHECK ({_TASK_CHECK}),"
            " status TEXT NOT NULL DEFAULT '',"
            " phase TEXT NOT NULL DEFAULT '',"  # core.states.TaskPhase: '' or 'probing'
            " queue TEXT,"
            " resource_key TEXT,"
            " resources TEXT,"  # JSON of the resolved resources of the last dispatch
            " units INTEGER,"  # chunk units (or 1 command), NULL until counted
            " started_s REAL,"
            " finished_s REAL,"
            # Kills for memory of its units, each counted (a replay does not undo them), the
            # largest memory per process its chunk or command units were dispatched with, and
            # the largest peaks its reports measured.
            " kills INTEGER NOT NULL DEFAULT 0,"
            " requested_gb REAL,"
            " peak_memory_gb REAL,"
            " peak_gpu_memory_gb REAL,"
            # Chunk units below the frontier were dispatched once; those at or above it are
            # pending and have no row. Each unit below it has a row, is in a range job in
            # flight, or is in a span (spans_done counts those).
            " frontier INTEGER NOT NULL DEFAULT 0,"
            " spans_done INTEGER NOT NULL DEFAULT 0,"
            # Reuse (`simrun.core.reuse`): its fingerprints, whether it may reuse (0: forced
            # to run), the run whose outputs it took, and the units it took from an earlier run.
            " fingerprint TEXT,"
            " reuse INTEGER NOT NULL DEFAULT 0,"
            " reused_from TEXT,"
            " unit_fingerprint TEXT,"
            " units_reused INTEGER NOT NULL DEFAULT 0,"
            " units_reused_from TEXT,"
            # What its workers spent staging its inputs, and the most scratch a job used (GiB).
            " staged_bytes INTEGER NOT NULL DEFAULT 0,"
            " staged_s REAL NOT NULL DEFAULT 0,"
            " scratch_peak_gb REAL,"
            " PRIMARY KEY (run_id, name)"
            ")",
            "CREATE INDEX tasks_by_fingerprint ON tasks (fingerprint, finished_s)"
            " WHERE state = 'done' AND fingerprint IS NOT NULL",
            "CREATE INDEX tasks_by_unit_fingerprint ON tasks (unit_fingerprint, finished_s)"
            " WHERE unit_fingerprint IS NOT NULL",
            "CREATE TABLE units ("
            " run_id TEXT NOT NULL,"
            " task TEXT NOT NULL,"
            " idx INTEGER NOT NULL,"
            f" kind TEXT NOT NULL CHECK (kind IN {sql_list(UNIT_KINDS)}),"
            " state TEXT NOT NULL"
            f"  CHECK (state IN {sql_list(UNIT_STATES)}),"
            " attempt INTEGER NOT NULL DEFAULT 0,"
            " job_id TEXT,"
            " memory_gb REAL,"
            " worker TEXT,"
            " error TEXT,"
            " errors INTEGER NOT NULL DEFAULT 0,"
            " kills INTEGER NOT NULL DEFAULT 0,"
            " queued_s REAL,"
            " started_s REAL,"
            " finished_s REAL,"
            " not_before_s REAL,"  # a retry waiting for its delay is not dispatched before
            " PRIMARY KEY (run_id, task, idx),"
            " FOREIGN KEY (run_id, task) REFERENCES tasks (run_id, name) ON DELETE CASCADE"
            ") WITHOUT ROWID",
            # Every column of the count per task, kind and state: no table lookup.
            "CREATE INDEX units_by_state ON units (run_id, task, kind, state, idx)",
            # Small while little waits: what the dispatcher looks at every step.
            "CREATE INDEX units_pending ON units (run_id, task, kind, idx) WHERE state = 'pending'",
            "CREATE INDEX units_by_job ON units (job_id)",
            # A range job done whole: its units, with what a unit row would have said.
            "CREATE TABLE spans ("
            " run_id TEXT NOT NULL,"
            " task TEXT NOT NULL,"
            " first_idx INTEGER NOT NULL,"
            " last_idx INTEGER NOT NULL,"
            " attempt INTEGER NOT NULL,"
            " job_id TEXT NOT NULL,"
            " memory_gb REAL,"
            " worker TEXT,"
            " queued_s REAL,"
            " started_s REAL,"
            " finished_s REAL,"
            " PRIMARY KEY (run_id, task, first_idx),"
            " FOREIGN KEY (run_id, task) REFERENCES tasks (run_id, name) ON DELETE CASCADE"
            ") WITHOUT ROWID",
            "CREATE TABLE jobs ("
            " id TEXT PRIMARY KEY,"
            " run_id TEXT NOT NULL,"
            " task TEXT NOT NULL,"
            " kind TEXT NOT NULL CHECK (kind IN ('chunk', 'merge', 'command')),"
            " queue TEXT NOT NULL,"
            " attempt INTEGER NOT NULL,"
            " units INTEGER NOT NULL,"
            " worker TEXT,"
            " enqueued_s REAL NOT NULL,"
            # A range job (first_idx set) holds fresh units first..last, which have no row;
            # its memory, whether it runs, and since when, are the job's.
            " first_idx INTEGER,"
            " last_idx INTEGER,"
            " memory_gb REAL,"
            " running INTEGER NOT NULL DEFAULT 0,"
            " started_s REAL,"
            " FOREIGN KEY (run_id, task) REFERENCES tasks (run_id, name) ON DELETE CASCADE"
            ")",
            "CREATE INDEX jobs_by_queue ON jobs (queue)",
            "CREATE INDEX jobs_by_run ON jobs (run_id, task)",
            # The times a run was stopped (its session ended before it did) until one went on.
            "CREATE TABLE pauses ("
            " run_id TEXT NOT NULL REFERENCES runs(id),"
            " stopped_s REAL NOT NULL,"
            " resumed_s REAL,"  # NULL: still stopped
            " PRIMARY KEY (run_id, stopped_s)"
            ") WITHOUT ROWID",
        ),
    ),
)

SPAN_COLUMNS = (
    "run_id, task, first_idx, last_idx, attempt, job_id, memory_gb, worker, queued_s,"
    " started_s, finished_s"
)

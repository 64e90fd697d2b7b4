"""The tables of the component ``runs`` of the service's SQLite file, as migration steps."""

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
        "runs, tasks, units and jobs in flight",
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
            " finished_s REAL"
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
            " splittable INTEGER NOT NULL CHECK (splittable IN (0, 1)),"
            " has_merge INTEGER NOT NULL CHECK (has_merge IN (0, 1)),"
            f" state TEXT NOT NULL CHECK ({_TASK_CHECK}),"
            " status TEXT NOT NULL DEFAULT '',"
            " queue TEXT,"
            " resource_key TEXT,"
            " resources TEXT,"  # JSON of the resolved resources of the last dispatch
            " units INTEGER,"  # chunk units (or 1 command), NULL until counted
            " started_s REAL,"
            " finished_s REAL,"
            " PRIMARY KEY (run_id, name)"
            ")",
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
            " PRIMARY KEY (run_id, task, idx),"
            " FOREIGN KEY (run_id, task) REFERENCES tasks (run_id, name) ON DELETE CASCADE"
            ") WITHOUT ROWID",
            "CREATE INDEX units_by_state ON units (run_id, task, state, idx)",
            "CREATE INDEX units_by_job ON units (job_id)",
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
            " FOREIGN KEY (run_id, task) REFERENCES tasks (run_id, name) ON DELETE CASCADE"
            ")",
            "CREATE INDEX jobs_by_queue ON jobs (queue)",
            "CREATE INDEX jobs_by_run ON jobs (run_id, task)",
        ),
    ),
    db.Migration(
        "indexes for 20,000 units a task: counts from the index alone, pending units apart",
        (
            "DROP INDEX units_by_state",
            # Holds every column of the count per task, kind and state: no table lookup.
            "CREATE INDEX units_by_state ON units (run_id, task, kind, state, idx)",
            # Small while little waits: what the dispatcher looks at every step.
            "CREATE INDEX units_pending ON units (run_id, task, kind, idx) WHERE state = 'pending'",
        ),
    ),
    db.Migration(
        "what a task's view shows without a scan of its units: kills, requested and peak memory",
        (
            # Kills for memory of its units, each one counted (a replay does not undo them).
            "ALTER TABLE tasks ADD COLUMN kills INTEGER NOT NULL DEFAULT 0",
            # The largest memory per process its chunk or command units were dispatched with.
            "ALTER TABLE tasks ADD COLUMN requested_gb REAL",
            # The largest peak memory of a worker process its reports measured.
            "ALTER TABLE tasks ADD COLUMN peak_memory_gb REAL",
            # Runs already in the file: what their units tell (their peaks are not kept there).
            "UPDATE tasks SET"
            " kills = (SELECT coalesce(sum(kills), 0) FROM units"
            "  WHERE units.run_id = tasks.run_id AND units.task = tasks.name),"
            " requested_gb = (SELECT max(memory_gb) FROM units"
            "  WHERE units.run_id = tasks.run_id AND units.task = tasks.name"
            "  AND units.kind != 'merge')",
        ),
    ),
    db.Migration(
        "units as ranges: a chunk unit has a row only when it has something of its own",
        (
            # Chunk units below the frontier were dispatched once; those at or above it are
            # pending and have no row. Each unit below it has a row, is in a range job in
            # flight, or is in a span (done in a range job).
            "ALTER TABLE tasks ADD COLUMN frontier INTEGER NOT NULL DEFAULT 0",
            # Units of the task's spans: done, and with no row.
            "ALTER TABLE tasks ADD COLUMN spans_done INTEGER NOT NULL DEFAULT 0",
            # A range job (first_idx set) holds fresh units first..last, which have no row;
            # its memory, whether it runs, and since when, are the job's.
            "ALTER TABLE jobs ADD COLUMN first_idx INTEGER",
            "ALTER TABLE jobs ADD COLUMN last_idx INTEGER",
            "ALTER TABLE jobs ADD COLUMN memory_gb REAL",
            "ALTER TABLE jobs ADD COLUMN running INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE jobs ADD COLUMN started_s REAL",
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
            # Stores made before: every unit of a started task has its row.
            "UPDATE tasks SET frontier = units WHERE splittable = 1 AND units IS NOT NULL",
        ),
    ),
    db.Migration(
        "retries per task: its rule, and when a unit's retry may be dispatched",
        (
            # JSON of the task's retries, retry_on, retry_delay_s and timeout_s; NULL: the
            # service's defaults.
            "ALTER TABLE tasks ADD COLUMN retry TEXT",
            # A pending unit waiting for the delay of its retry is not dispatched before.
            "ALTER TABLE units ADD COLUMN not_before_s REAL",
        ),
    ),
    db.Migration(
        "reuse of unchanged work: a task's fingerprint, whether it may reuse, what it reused",
        (
            # `simrun.core.reuse.fingerprint` of the task, known at submission (NULL: a run
            # submitted before, never reused from).
            "ALTER TABLE tasks ADD COLUMN fingerprint TEXT",
            # 0: forced to run (--no-reuse, --rerun, or a forced task upstream).
            "ALTER TABLE tasks ADD COLUMN reuse INTEGER NOT NULL DEFAULT 0",
            # The run whose outputs this task took instead of running.
            "ALTER TABLE tasks ADD COLUMN reused_from TEXT",
            # The done tasks of a fingerprint, latest first: what a starting task looks for.
            "CREATE INDEX tasks_by_fingerprint ON tasks (fingerprint, finished_s)"
            " WHERE state = 'done' AND fingerprint IS NOT NULL",
        ),
    ),
    db.Migration(
        "the times a run was stopped: its session ended before it did, until one went on",
        (
            "CREATE TABLE pauses ("
            " run_id TEXT NOT NULL REFERENCES runs(id),"
            " stopped_s REAL NOT NULL,"
            " resumed_s REAL,"  # NULL: still stopped
            " PRIMARY KEY (run_id, stopped_s)"
            ") WITHOUT ROWID",
        ),
    ),
    db.Migration(
        "reuse per unit: a task's unit fingerprint, and the units it took from an earlier run",
        (
            # `simrun.core.reuse.unit_fingerprint` of a splittable task whose type declares
            # its unit outputs (NULL: it reuses no unit, and none is reused from it).
            "ALTER TABLE tasks ADD COLUMN unit_fingerprint TEXT",
            # How many of its units it took from the run units_reused_from (spans of their own).
            "ALTER TABLE tasks ADD COLUMN units_reused INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE tasks ADD COLUMN units_reused_from TEXT",
            # The finished tasks of a unit fingerprint (done, failed or cancelled).
            "CREATE INDEX tasks_by_unit_fingerprint ON tasks (unit_fingerprint, finished_s)"
            " WHERE unit_fingerprint IS NOT NULL",
        ),
    ),
    db.Migration(
        "the environment image of a run: where its tasks without an image of their own run",
        (
            # The workflow's `image`, else the service's default (NULL: none, the cpu and
            # gpu queues' own workers).
            "ALTER TABLE runs ADD COLUMN image TEXT",
        ),
    ),
    db.Migration(
        "the GPU memory of a task: the largest its reports measured on their GPUs",
        ("ALTER TABLE tasks ADD COLUMN peak_gpu_memory_gb REAL",),
    ),
    db.Migration(
        "staged inputs and local scratch: which ports a task stages, what staging and scratch took",
        (
            # JSON list of the input ports copied into the task's local scratch (NULL: none).
            "ALTER TABLE tasks ADD COLUMN staged TEXT",
            # Bytes copied and seconds spent staging, summed over the workers of the task.
            "ALTER TABLE tasks ADD COLUMN staged_bytes INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE tasks ADD COLUMN staged_s REAL NOT NULL DEFAULT 0",
            # The most local scratch a job of the task was measured to use, in GiB.
            "ALTER TABLE tasks ADD COLUMN scratch_peak_gb REAL",
        ),
    ),
    db.Migration(
        "the dispatch phase of a task: '' (its units go out as usual) or 'probing'",
        ("ALTER TABLE tasks ADD COLUMN phase TEXT NOT NULL DEFAULT ''",),
    ),
)

#: Most host parameters in one statement, well below SQLite's limit.
_BATCH = 500

UNIT_COLUMNS = (
    "run_id, task, idx, kind, state, attempt, job_id, memory_gb, worker, error, errors, kills,"
    " queued_s, started_s, finished_s, not_before_s"
)
TASK_COLUMNS = (
    "run_id, name, position, type, settings, inputs, depends, override, memory_override_gb,"
    " splittable, has_merge, state, status, queue, resource_key, resources, units,"
    " started_s, finished_s, kills, requested_gb, peak_memory_gb, frontier, spans_done, retry,"
    " fingerprint, reuse, reused_from, unit_fingerprint, units_reused, units_reused_from,"
    " peak_gpu_memory_gb,"
    " staged, staged_bytes, staged_s, scratch_peak_gb, phase"
)
RUN_COLUMNS = "id, name, model, state, message, document, created_s, updated_s, finished_s, image"
JOB_COLUMNS = (
    "id, run_id, task, kind, queue, attempt, units, worker, enqueued_s,"
    " first_idx, last_idx, memory_gb, running, started_s"
)
SPAN_COLUMNS = (
    "run_id, task, first_idx, last_idx, attempt, job_id, memory_gb, worker, queued_s,"
    " started_s, finished_s"
)

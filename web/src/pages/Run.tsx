import { useEffect, useMemo, useState } from "react";
import { Background, Controls, ReactFlow, type Edge, type Node } from "@xyflow/react";
import { ApiError, follow, getJson, postJson } from "../api";
import { StateBadge, UnitsBar, stateColor } from "../components/Bars";
import { count, duration, gb, when } from "../format";
import { groupFailures, layered } from "../graphLayout";

interface TaskView {
  name: string;
  type: string;
  state: string;
  status: string;
  queue: string | null;
  units: number | null;
  counts: Record<string, number>;
  merge: string | null;
  eta_s: number | null;
  resource_key: string | null;
  depends: string[];
  splittable: boolean;
  kills: number | null;
  requested_gb: number | null;
  peak_memory_gb: number | null;
  reused_from: string | null;
  seconds_per_unit: number | null;
  units_per_s: number | null;
}

interface RunView {
  id: string;
  name: string | null;
  state: string;
  message: string;
  created_s: number;
  finished_s: number | null;
  eta_s: number | null;
  tasks: TaskView[];
}

interface Failure {
  task: string;
  unit: number | string;
  attempt: number;
  errors: number;
  kills: number;
  worker: string | null;
  error: string | null;
}

// The states of a task's strip, and its units killed for memory at least once.
const STRIP_STATES = ["done", "running", "queued", "pending", "failed", "killed"];

function TaskNode(props: { data: { task: TaskView } }): JSX.Element {
  const t = props.data.task;
  return (
    <div className="run-node" style={{ borderColor: stateColor(t.state) }}>
      <strong>{t.name}</strong> <span className="muted small">{t.type}</span>
      <UnitsBar counts={t.counts} total={t.units ?? 0} label={`graph progress of ${t.name}`} />
      <div className="small">
        <StateBadge state={t.state} />
      </div>
    </div>
  );
}
const nodeTypes = { task: TaskNode };

function MemoryBar(props: { requested: number | null; peak: number | null }): JSX.Element {
  const { requested, peak } = props;
  if (!requested && !peak) return <span className="muted">—</span>;
  const top = Math.max(requested ?? 0, peak ?? 0) || 1;
  return (
    <div className="membar" title={`requested ${gb(requested)}, used at peak ${gb(peak)}`}>
      <span className="req" style={{ width: `${(100 * (requested ?? 0)) / top}%` }} />
      <span className="use" style={{ width: `${(100 * (peak ?? 0)) / top}%` }} />
      <em>
        {gb(peak)} of {gb(requested)}
      </em>
    </div>
  );
}

function UnitLog(props: {
  runId: string;
  task: string;
  unit: string | number;
  onReplay: () => void;
}): JSX.Element {
  const [logs, setLogs] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setLogs(null);
    setError(null);
    getJson(`/runs/${props.runId}/logs/${encodeURIComponent(props.task)}/${props.unit}`)
      .then(setLogs)
      .catch((e: Error) => setError(e.message));
  }, [props.runId, props.task, props.unit]);
  return (
    <div className="unit-log" aria-label="unit log">
      <h3>
        {props.task} · unit {String(props.unit)}
      </h3>
      {error && <p className="muted">{error}</p>}
      {logs?.attempts?.map((a: any) => (
        <details key={a.header.attempt} open={a === logs.attempts[logs.attempts.length - 1]}>
          <summary>
            attempt {a.header.attempt}: <b>{a.header.outcome}</b> on {a.header.worker} · peak{" "}
            {gb(a.header.peak_gb)} of {gb(a.header.limit_gb)} · {when(a.header.started)}
          </summary>
          {a.header.error && <pre className="traceback">{a.header.error}</pre>}
          <pre className="output">{a.output || "(no output)"}</pre>
        </details>
      ))}
      <button onClick={props.onReplay}>Replay this unit</button>
    </div>
  );
}

function Strip(props: {
  runId: string;
  task: TaskView;
  onUnit: (u: string | number) => void;
  onReplay: (units: number[]) => void;
}): JSX.Element {
  const { task } = props;
  const [state, setState] = useState<string | null>(task.counts.failed ? "failed" : null);
  const [chosen, setChosen] = useState<number[]>([]);
  const [page, setPage] = useState<any>(null);
  const [offset, setOffset] = useState(0);
  useEffect(() => {
    if (!state) return;
    const q = new URLSearchParams({ task: task.name, state, offset: String(offset), limit: "200" });
    getJson(`/runs/${props.runId}/units?${q}`)
      .then(setPage)
      .catch(() => setPage(null));
  }, [props.runId, task.name, state, offset, task.counts[state ?? ""]]);
  return (
    <div className="strip" aria-label={`units of ${task.name}`}>
      <div className="strip-states" role="tablist">
        {STRIP_STATES.map((s) => (
          <button
            key={s}
            role="tab"
            aria-selected={state === s}
            className={state === s ? "on" : ""}
            style={{ borderColor: stateColor(s) }}
            onClick={() => {
              setState(s);
              setOffset(0);
            }}
          >
            {s} {count(s === "killed" ? (task.kills ?? 0) : (task.counts[s] ?? 0))}
          </button>
        ))}
      </div>
      {state && page && (
        <>
          <div className="chips">
            {page.units.map((u: any) => (
              <button
                key={String(u.unit)}
                className="chip"
                title={u.error ?? `${u.state}, attempt ${u.attempt}`}
                style={{ background: u.kills ? stateColor("killed") : stateColor(u.state) }}
                aria-pressed={chosen.includes(u.index)}
                onClick={(e) => {
                  if (e.ctrlKey || e.metaKey || e.shiftKey) {
                    if (typeof u.unit !== "number") return;
                    setChosen((c) =>
                      c.includes(u.index) ? c.filter((i) => i !== u.index) : [...c, u.index],
                    );
                  } else props.onUnit(u.unit);
                }}
              >
                {String(u.unit)}
              </button>
            ))}
          </div>
          <div className="small muted">
            {page.total === 0
              ? "none"
              : `${page.offset + 1}–${page.offset + page.units.length} of ${count(page.total)}`}{" "}
            {page.offset > 0 && (
              <button onClick={() => setOffset(Math.max(0, offset - 200))}>previous</button>
            )}
            {page.offset + page.units.length < page.total && (
              <button onClick={() => setOffset(offset + 200)}>next</button>
            )}
            {state === "failed" && (
              <>
                {" · Ctrl-click units to choose them "}
                <button
                  disabled={!chosen.length}
                  onClick={() => {
                    props.onReplay(chosen);
                    setChosen([]);
                  }}
                >
                  Replay chosen ({chosen.length})
                </button>
              </>
            )}
          </div>
        </>
      )}
    </div>
  );
}

export function RunPage(props: { runId: string }): JSX.Element {
  const { runId } = props;
  const [view, setView] = useState<RunView | null>(null);
  const [failures, setFailures] = useState<Failure[]>([]);
  const [openTask, setOpenTask] = useState<string | null>(null);
  const [unit, setUnit] = useState<{ task: string; unit: string | number } | null>(null);
  const [memory, setMemory] = useState("");
  const [notice, setNotice] = useState<string | null>(null);
  const [missing, setMissing] = useState<string | null>(null);
  // Bumped by a replay: the stream of an ended run closed, and the run goes on again.
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    let ended = false;
    return follow(
      `/runs/${runId}/events`,
      (name, data) => {
        if (name === "missing") setMissing(data?.detail ?? `there is no run ${runId}`);
        if (name !== "run") return;
        setView(data as RunView);
        ended = data.state !== "running";
      },
      { reconnect: () => !ended },
    );
  }, [runId, generation]);
  const failedCount = view?.tasks.reduce((n, t) => n + (t.counts.failed ?? 0), 0) ?? 0;
  useEffect(() => {
    getJson<Failure[]>(`/runs/${runId}/failures`)
      .then(setFailures)
      .catch(() => setFailures([]));
  }, [runId, failedCount]);
  const graph = useMemo(() => {
    if (!view) return { nodes: [] as Node[], edges: [] as Edge[] };
    const at = layered(view.tasks);
    return {
      nodes: view.tasks.map((t) => ({
        id: t.name,
        type: "task",
        position: at[t.name],
        data: { task: t },
        draggable: false,
        connectable: false,
      })),
      edges: view.tasks.flatMap((t) =>
        t.depends.map((d) => ({
          id: `${d}->${t.name}`,
          source: d,
          target: t.name,
          animated: t.state === "running",
        })),
      ),
    };
  }, [view]);
  if (!view) return <p className="muted">{missing ?? `Loading run ${runId}…`}</p>;
  const total = view.tasks.reduce((n, t) => n + (t.units ?? 0), 0);
  const counts: Record<string, number> = {};
  for (const t of view.tasks) for (const [k, v] of Object.entries(t.counts)) counts[k] = (counts[k] ?? 0) + v;
  const act = async (what: string, body: unknown): Promise<void> => {
    try {
      const answer = await postJson(`/runs/${runId}/${what}`, body);
      setNotice(what === "cancel" ? "cancelled" : `replayed ${answer.replayed} unit(s)`);
      setGeneration((g) => g + 1);
    } catch (e) {
      setNotice(e instanceof ApiError ? e.message : String(e));
    }
  };
  const memoryGb = memory.trim() ? Number(memory) : undefined;
  const shown = view.tasks.find((t) => t.name === openTask);
  return (
    <section>
      <div className="toolbar">
        <h1>{view.name ?? view.id}</h1>
        <StateBadge state={view.state} />
        <span className="muted">
          {view.id} · started {when(view.created_s)} · ETA{" "}
          {view.state === "running" ? duration(view.eta_s) : "—"}
        </span>
      </div>
      {view.message && <p className="muted">{view.message}</p>}
      <UnitsBar counts={counts} total={total} label="run progress" />
      <div className="actions">
        <label>
          memory GiB{" "}
          <input
            aria-label="replay memory"
            className="short"
            inputMode="decimal"
            placeholder="same"
            value={memory}
            onChange={(e) => setMemory(e.target.value)}
          />
        </label>
        <button disabled={!failedCount} onClick={() => act("replay", { memory_gb: memoryGb })}>
          Replay failed ({failedCount})
        </button>
        <button disabled={view.state !== "running"} onClick={() => act("cancel", {})}>
          Cancel run
        </button>
        <a href={`#/editor/${runId}`}>Open in Editor</a>
        {notice && <span role="status">{notice}</span>}
      </div>
      <div className="graph" aria-label="task graph">
        <ReactFlow
          nodes={graph.nodes}
          edges={graph.edges}
          nodeTypes={nodeTypes}
          fitView
          fitViewOptions={{ maxZoom: 1 }}
          proOptions={{ hideAttribution: true }}
          onNodeClick={(_, n) => setOpenTask(n.id)}
          nodesDraggable={false}
          nodesConnectable={false}
        >
          <Background />
          <Controls showInteractive={false} />
        </ReactFlow>
      </div>
      <div className="scroll">
        <table className="tasks">
          <thead>
            <tr>
              <th>Task</th>
              <th>State</th>
              <th>Units</th>
              <th>Memory used / requested</th>
              <th>Kills</th>
              <th>Speed</th>
              <th>ETA</th>
            </tr>
          </thead>
          <tbody>
            {view.tasks.map((t) => (
              <tr key={t.name} className={openTask === t.name ? "open" : ""}>
                <td>
                  <button
                    className="link"
                    aria-expanded={openTask === t.name}
                    onClick={() => setOpenTask(openTask === t.name ? null : t.name)}
                  >
                    {t.name}
                  </button>
                  <div className="muted small">
                    {t.type}
                    {t.resource_key && (
                      <>
                        {" · "}
                        <a href={`#/resources/${t.resource_key}`}>{t.resource_key}</a>
                      </>
                    )}
                  </div>
                </td>
                <td>
                  <StateBadge state={t.state} />
                  <div className="muted small">
                    {t.reused_from ? `reused from ${t.reused_from}` : t.status}
                  </div>
                </td>
                <td className="wide">
                  <UnitsBar counts={t.counts} total={t.units ?? 0} label={`progress of ${t.name}`} />
                  <div className="muted small">
                    {count(t.counts.done ?? 0)} / {count(t.units)} {t.merge ? `· merge ${t.merge}` : ""}
                  </div>
                </td>
                <td>
                  <MemoryBar requested={t.requested_gb} peak={t.peak_memory_gb} />
                </td>
                <td className={t.kills ? "bad" : ""}>{count(t.kills ?? 0)}</td>
                <td title="seconds per unit (learned), units per second (observed)">
                  {t.seconds_per_unit === null ? "—" : `${t.seconds_per_unit.toPrecision(2)} s/unit`}
                  {t.units_per_s ? (
                    <div className="muted small">{t.units_per_s.toPrecision(2)} units/s</div>
                  ) : null}
                </td>
                <td>{t.state === "running" ? duration(t.eta_s) : "—"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {shown && (
        <Strip
          key={shown.name}
          runId={runId}
          task={shown}
          onUnit={(u) => setUnit({ task: shown.name, unit: u })}
          onReplay={(units) => act("replay", { task: shown.name, units, memory_gb: memoryGb })}
        />
      )}
      {unit && (
        <UnitLog
          runId={runId}
          task={unit.task}
          unit={unit.unit}
          onReplay={() =>
            act("replay", {
              task: unit.task,
              units: typeof unit.unit === "number" ? [unit.unit] : [],
              memory_gb: memoryGb,
            })
          }
        />
      )}
      {failures.length > 0 && (
        <div className="failures">
          <h2>Failures by error</h2>
          {groupFailures(failures).map((g) => (
            <details key={g.error}>
              <summary>
                <b>{g.units.length}</b> × <code>{g.error}</code>
              </summary>
              <div className="chips">
                {g.units.map((f) => (
                  <button
                    key={`${f.task}/${f.unit}`}
                    className="chip"
                    style={{ background: stateColor(f.kills ? "killed" : "failed") }}
                    onClick={() => {
                      setOpenTask(f.task);
                      setUnit({ task: f.task, unit: f.unit });
                    }}
                  >
                    {f.task}/{String(f.unit)}
                  </button>
                ))}
              </div>
            </details>
          ))}
        </div>
      )}
    </section>
  );
}

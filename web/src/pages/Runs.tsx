import { useEffect, useState } from "react";
import { follow } from "../api";
import { StateBadge, UnitsBar } from "../components/Bars";
import { count, duration, when } from "../format";

interface RunLine {
  id: string;
  name: string | null;
  state: string;
  message: string;
  created_s: number;
  running_s: number;
  eta_s: number | null;
  units: number;
  done: number;
  running: number;
  failed: number;
  killed: number;
}

// A run's states (simrun.core.states.RunState), and "interrupted" (running in the store,
// nothing goes on with it).
const STATES = ["", "running", "succeeded", "failed", "cancelled", "interrupted"];

export function RunsPage(): JSX.Element {
  const [state, setState] = useState("");
  const [text, setText] = useState("");
  const [runs, setRuns] = useState<RunLine[] | null>(null);
  useEffect(() => {
    const query = new URLSearchParams();
    if (state) query.set("state", state);
    if (text.trim()) query.set("q", text.trim());
    return follow(`/dashboard/runs/events?${query}`, (name, data) => {
      if (name === "runs") setRuns(data as RunLine[]);
    });
  }, [state, text]);
  return (
    <section>
      <div className="toolbar">
        <h1>Runs</h1>
        <label>
          State{" "}
          <select aria-label="state filter" value={state} onChange={(e) => setState(e.target.value)}>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s || "any"}
              </option>
            ))}
          </select>
        </label>
        <input
          type="search"
          aria-label="search runs"
          placeholder="name, id or model"
          value={text}
          onChange={(e) => setText(e.target.value)}
        />
      </div>
      {runs === null ? (
        <p className="muted">Loading…</p>
      ) : runs.length === 0 ? (
        <p className="muted">
          No run yet. Start one with <code>simrun run examples/heat.yaml</code> or build one in the{" "}
          <a href="#/editor">Editor</a>.
        </p>
      ) : (
        <div className="scroll">
          <table className="runs">
            <thead>
              <tr>
                <th>Run</th>
                <th>State</th>
                <th>Progress</th>
                <th>Started</th>
                <th>Running</th>
                <th>ETA</th>
                <th>Failed</th>
                <th>Killed</th>
              </tr>
            </thead>
            <tbody>
              {runs.map((r) => (
                <tr key={r.id} onClick={() => (window.location.hash = `#/runs/${r.id}`)}>
                  <td>
                    <a href={`#/runs/${r.id}`}>{r.name ?? r.id}</a>
                    <div className="muted small">{r.id}</div>
                  </td>
                  <td>
                    <StateBadge state={r.state} />
                  </td>
                  <td className="wide">
                    <UnitsBar
                      counts={{ done: r.done, running: r.running, failed: r.failed }}
                      total={r.units}
                      label={`progress of ${r.name ?? r.id}`}
                    />
                    <div className="muted small">
                      {count(r.done)} / {count(r.units)} units
                    </div>
                  </td>
                  <td>{when(r.created_s)}</td>
                  <td>{duration(r.running_s)}</td>
                  <td>{r.state === "running" ? duration(r.eta_s) : "—"}</td>
                  <td className={r.failed ? "bad" : ""}>{count(r.failed)}</td>
                  <td className={r.killed ? "bad" : ""}>{count(r.killed)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

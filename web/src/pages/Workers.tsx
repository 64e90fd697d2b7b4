import { useEffect, useState } from "react";
import { follow } from "../api";
import { clockSkew, count, duration, gb } from "../format";

export function WorkersPage(): JSX.Element {
  const [data, setData] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(
    () =>
      follow("/workers/events", (name, d) => {
        if (name === "workers") {
          setData(d);
          setError(null);
        } else setError(d.detail);
      }),
    [],
  );
  if (!data) return <p className="muted">{error ?? "Loading…"}</p>;
  const queues: any[] = data.backlog?.queues ?? [];
  return (
    <section>
      <h1>Workers and queues</h1>
      {error && <p className="bad">{error}</p>}
      <div className="scroll">
        <table className="queues">
          <thead>
            <tr>
              <th>Queue</th>
              <th>Backlog (units)</th>
              <th>Backlog (s of work)</th>
              <th>Workers live</th>
              <th>
                <code>simrun scale</code> would ask
              </th>
            </tr>
          </thead>
          <tbody>
            {queues.map((q) => (
              <tr key={q.queue}>
                <td>{q.queue}</td>
                <td>{count(q.units)}</td>
                <td>{duration(q.scale?.work_s)}</td>
                <td>{count(q.workers)}</td>
                <td title={q.scale?.reason}>
                  {q.scale ? `${q.scale.desired} container(s)` : "—"}
                  <div className="muted small">{q.scale?.reason}</div>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <h2>Worker containers</h2>
      {data.workers.length === 0 && <p className="muted">No live worker.</p>}
      <div className="cards">
        {data.workers.map((w: any) => {
          const reserved = w.memory_gb - w.free_memory_gb;
          // measured by the worker every beat (null from a worker that does not say)
          const inUse: number | null = w.used_memory_gb ?? null;
          return (
            <div className="card" key={w.id} aria-label={`worker ${w.id}`}>
              <b>{w.id}</b> <span className="muted small">{w.host}</span>
              <div className="small">queues: {w.queues.join(", ")}</div>
              <div className="small">
                processes {w.processes - w.free_processes} busy of {w.processes}
                {w.gpus ? ` · ${w.gpus} GPU` : ""}
              </div>
              <div
                className="membar"
                aria-label="memory in use"
                title={`${inUse === null ? "not measured yet" : `${gb(inUse)} held by its processes`}, ${gb(reserved)} reserved by running jobs, of ${gb(w.memory_gb)}`}
              >
                <span
                  className="use"
                  style={{ width: `${(100 * (inUse ?? reserved)) / Math.max(w.memory_gb, 1e-9)}%` }}
                />
                <em>
                  {inUse === null ? "—" : gb(inUse)} in use of {gb(w.memory_gb)} · {gb(reserved)} reserved
                </em>
              </div>
              <div
                className={w.clock_warning ? "small bad" : "small muted"}
                aria-label="clock skew"
                title="this worker's clock minus the Redis server's, at its last heartbeat"
              >
                {clockSkew(w.clock_skew_s)}
                {w.clock_warning ? ` · ${w.clock_warning}` : ""}
              </div>
              <div className="small muted">
                {w.running.length} job(s){w.stopping ? " · stopping" : ""}
                {w.running.slice(0, 5).map((j: any) => (
                  <div key={j.job_id}>
                    <a href={`#/runs/${j.run}`}>{j.task}</a> {j.state} · units {j.indices.length}
                  </div>
                ))}
              </div>
            </div>
          );
        })}
      </div>
    </section>
  );
}

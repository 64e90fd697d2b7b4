import { percent } from "../format";

export const STATE_COLORS: Record<string, string> = {
  done: "#16a34a",
  succeeded: "#16a34a",
  ready: "#a855f7",
  merging: "#2563eb",
  running: "#2563eb",
  queued: "#a855f7",
  pending: "#cbd5e1",
  failed: "#dc2626",
  killed: "#f97316",
  cancelled: "#64748b",
  blocked: "#eab308",
  waiting: "#cbd5e1",
  interrupted: "#eab308",
  reused: "#0d9488",
};

export function stateColor(state: string): string {
  return STATE_COLORS[state] ?? "#94a3b8";
}

/** A bar of a task's (or run's) units by state. */
export function UnitsBar(props: {
  counts: Record<string, number>;
  total: number;
  label?: string;
}): JSX.Element {
  const { counts, total } = props;
  const order = ["done", "running", "queued", "failed"];
  const done = counts.done ?? 0;
  return (
    <div
      className="bar"
      role="progressbar"
      aria-label={props.label ?? "progress"}
      aria-valuenow={percent(done, total)}
      aria-valuemin={0}
      aria-valuemax={100}
    >
      {order.map((state) =>
        counts[state] ? (
          <span
            key={state}
            title={`${counts[state]} ${state}`}
            style={{ width: `${(100 * counts[state]) / Math.max(total, 1)}%`, background: stateColor(state) }}
          />
        ) : null,
      )}
      <em>{percent(done, total)} %</em>
    </div>
  );
}

export function StateBadge(props: { state: string }): JSX.Element {
  return (
    <span className="badge" style={{ background: stateColor(props.state) }}>
      {props.state}
    </span>
  );
}

import { useEffect, useState } from "react";
import { getJson } from "../api";
import { gb, when } from "../format";
import { histogram, niceTop, timeAxis } from "../plot";

interface Evidence {
  key: string;
  explanation: {
    requested_gb: number;
    source: string;
    samples: number;
    runs: number;
    hint_gb: number;
    reasons: string[];
  };
  peaks_gb: number[];
  /** When each peak was recorded (Unix seconds; empty from an older service). */
  peaks_s?: number[];
  kills: [number, number][];
  observations: number;
}

const W = 640;
const H = 260;
const PAD = 40;
/** Room for the axis labels ("1.25 GiB"). */
const LEFT = 70;

/** The peaks of a key over time (when each was recorded, left to right), the request drawn
 * across them, each kill marked at its limit when it happened, and the histogram of the
 * peaks beside. */
export function MemoryPlot(props: { evidence: Evidence }): JSX.Element {
  const { peaks_gb: peaks, kills, explanation } = props.evidence;
  const measured = Math.max(explanation.requested_gb, ...peaks, ...kills.map((k) => k[1]), 0.001);
  // The hint is drawn when it is near what was measured; far above, it would flatten the
  // peaks (the text above the plot tells it).
  const showHint = explanation.hint_gb <= 2 * measured;
  const top = niceTop(Math.max(measured, showHint ? explanation.hint_gb : 0) * 1.1);
  const y = (v: number) => H - PAD - ((H - 2 * PAD) * v) / top;
  const n = peaks.length + kills.length;
  const times = props.evidence.peaks_s ?? [];
  const timed = times.length === peaks.length && times.length > 0;
  const pos = timeAxis(timed ? times : [], timed ? kills.map((k) => k[0]) : [], n);
  const x = (i: number, t?: number) => LEFT + (W - LEFT - PAD - 120) * pos(i, timed ? t : undefined);
  const bins = histogram(peaks, top, 20);
  const most = Math.max(1, ...bins.map((b) => b.count));
  const histX = W - PAD - 110;
  return (
    <svg
      className="plot"
      viewBox={`0 0 ${W} ${H}`}
      role="img"
      aria-label={`memory plot of ${props.evidence.key}`}
    >
      <line x1={LEFT} y1={H - PAD} x2={W - PAD} y2={H - PAD} stroke="#94a3b8" />
      <line x1={LEFT} y1={PAD} x2={LEFT} y2={H - PAD} stroke="#94a3b8" />
      {[0, 0.25, 0.5, 0.75, 1].map((f) => (
        <g key={f}>
          <line x1={LEFT - 4} x2={W - PAD} y1={y(f * top)} y2={y(f * top)} stroke="#e2e8f0" />
          <text x={LEFT - 6} y={y(f * top) + 4} textAnchor="end" fontSize="10">
            {gb(f * top)}
          </text>
        </g>
      ))}
      {peaks.map((p, i) => (
        <circle
          key={`p${i}`}
          className="peak"
          cx={x(i, times[i])}
          cy={y(p)}
          r={3}
          fill="#2563eb"
          opacity={0.7}
        >
          <title>
            peak {gb(p)}
            {timed ? ` (${when(times[i])})` : ""}
          </title>
        </circle>
      ))}
      {kills.map(([at, limit], i) => (
        <g key={`k${i}`} className="kill">
          <path
            d={`M${x(peaks.length + i, at) - 5},${y(limit) - 5}l10,10m0,-10l-10,10`}
            stroke="#dc2626"
            strokeWidth={2}
          />
          <title>
            killed at its limit {gb(limit)} ({when(at)})
          </title>
        </g>
      ))}
      <line
        className="request"
        x1={LEFT}
        x2={W - PAD}
        y1={y(explanation.requested_gb)}
        y2={y(explanation.requested_gb)}
        stroke="#16a34a"
        strokeDasharray="6 4"
        strokeWidth={2}
      />
      <text x={LEFT + 4} y={y(explanation.requested_gb) - 4} fontSize="11" fill="#16a34a">
        request {gb(explanation.requested_gb)} ({explanation.source})
      </text>
      {showHint && (
        <line
          className="hint"
          x1={LEFT}
          x2={W - PAD}
          y1={y(explanation.hint_gb)}
          y2={y(explanation.hint_gb)}
          stroke="#94a3b8"
          strokeDasharray="2 3"
        />
      )}
      {showHint && (
        <text x={LEFT + 4} y={y(explanation.hint_gb) - 4} fontSize="10" fill="#64748b">
          hint {gb(explanation.hint_gb)}
        </text>
      )}
      {bins.map((b, i) => (
        <rect
          key={`h${i}`}
          x={histX}
          y={y(b.to)}
          height={Math.max(0, y(b.from) - y(b.to) - 1)}
          width={(100 * b.count) / most}
          fill="#93c5fd"
        />
      ))}
      <text x={histX} y={PAD - 8} fontSize="10">
        histogram of peaks
      </text>
      <text x={LEFT} y={H - 10} fontSize="10">
        {timed
          ? `peaks of the window over time, ${when(Math.min(...times, ...kills.map((k) => k[0])))} to ${when(Math.max(...times, ...kills.map((k) => k[0])))}`
          : "peaks of the window, oldest first"}{" "}
        · ✕ kills at their limit
      </text>
    </svg>
  );
}

export function ResourcePage(props: { resourceKey: string }): JSX.Element {
  const [evidence, setEvidence] = useState<Evidence | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const load = () =>
      getJson<Evidence>(`/resources/${props.resourceKey}`)
        .then(setEvidence)
        .catch((e: Error) => setError(e.message));
    load();
    const timer = setInterval(load, 5000);
    return () => clearInterval(timer);
  }, [props.resourceKey]);
  if (error && !evidence) return <p className="muted">{error}</p>;
  if (!evidence) return <p className="muted">Loading…</p>;
  const e = evidence.explanation;
  return (
    <section>
      <h1>Memory of {evidence.key}</h1>
      <p>
        Requests <b>{gb(e.requested_gb)}</b> per process ({e.source}); {e.samples} samples of {e.runs} run(s),{" "}
        {evidence.kills.length} kill(s) for memory, hint {gb(e.hint_gb)}.
      </p>
      <MemoryPlot evidence={evidence} />
      <h2>Why</h2>
      <ul className="reasons">
        {e.reasons.map((r) => (
          <li key={r}>{r}</li>
        ))}
      </ul>
    </section>
  );
}

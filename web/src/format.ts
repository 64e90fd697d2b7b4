// How the pages write durations, sizes and counts (as the command line does).

export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 1) return "<1 s";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

export function gb(value: number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  if (value < 1) return `${Math.round(value * 1024)} MiB`;
  return `${value.toFixed(value < 10 ? 2 : 1)} GiB`;
}

export function count(n: number | null | undefined): string {
  return n === null || n === undefined ? "—" : n.toLocaleString("en");
}

export function when(unixSeconds: number | null | undefined): string {
  if (!unixSeconds) return "—";
  return new Date(unixSeconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

export function percent(done: number, total: number): number {
  return total > 0 ? Math.min(100, Math.floor((100 * done) / total)) : 0;
}

/** A worker's clock skew against Redis's, in seconds (null: not measured yet). */
export function clockSkew(skew: number | null | undefined): string {
  if (skew === null || skew === undefined) return "clock not measured yet";
  const sign = skew >= 0 ? "+" : "−";
  return `clock ${sign}${Math.abs(skew).toFixed(1)} s vs Redis`;
}

// The numbers of the memory plot: a histogram of the peaks and the scale. Pure: tested in
// plot.test.ts.

export interface Bin {
  from: number;
  to: number;
  count: number;
}

/** ``values`` in ``bins`` equal bins from 0 to ``top`` (the last bin holds ``top``). */
export function histogram(values: number[], top: number, bins = 20): Bin[] {
  const width = top > 0 ? top / bins : 1;
  const out: Bin[] = Array.from({ length: bins }, (_, i) => ({
    from: i * width,
    to: (i + 1) * width,
    count: 0,
  }));
  for (const v of values) {
    const i = Math.min(bins - 1, Math.max(0, Math.floor(v / width)));
    out[i].count += 1;
  }
  return out;
}

/** A round top for an axis at or above ``value`` (1, 2, 2.5, 5 times a power of ten). */
export function niceTop(value: number): number {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

/** The x position (0..1) of each of ``times`` on a time axis from the first to the last of
 * ``times`` and ``others`` (the kills' times): by time, or spread evenly by order when
 * they all share one time or none is known (``times`` empty of values). */
export function timeAxis(times: number[], others: number[], n: number): (i: number, t?: number) => number {
  const all = [...times, ...others].filter((t) => t > 0);
  const first = Math.min(...all);
  const last = Math.max(...all);
  if (all.length === 0 || !(last > first)) {
    return (i: number) => (i + 0.5) / Math.max(n, 1);
  }
  return (_i: number, t?: number) => (t === undefined ? 0.5 : 0.02 + (0.96 * (t - first)) / (last - first));
}

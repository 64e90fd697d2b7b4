// Positions of a run's tasks on its graph: columns by depth along the dependencies.
// Pure: tested in graphLayout.test.ts.

export interface GraphTask {
  name: string;
  depends: string[];
}

export function layered(tasks: GraphTask[], dx = 260, dy = 110): Record<string, { x: number; y: number }> {
  const names = new Set(tasks.map((t) => t.name));
  const deps = new Map(tasks.map((t) => [t.name, t.depends.filter((d) => names.has(d))]));
  const depth = new Map<string, number>();
  const visit = (name: string, seen: Set<string>): number => {
    const known = depth.get(name);
    if (known !== undefined) return known;
    if (seen.has(name)) return 0;
    seen.add(name);
    const d = Math.max(-1, ...(deps.get(name) ?? []).map((p) => visit(p, seen))) + 1;
    depth.set(name, d);
    return d;
  };
  const rows = new Map<number, number>();
  const out: Record<string, { x: number; y: number }> = {};
  for (const t of tasks) {
    const d = visit(t.name, new Set());
    const row = rows.get(d) ?? 0;
    rows.set(d, row + 1);
    out[t.name] = { x: d * dx, y: row * dy };
  }
  return out;
}

/** Failures grouped by their error's last line (the exception and its message), its
 * numbers left out: "unit 3 failed" and "unit 7 failed" are one error. */
export function groupFailures<T extends { error: string | null }>(
  failures: T[],
): { error: string; units: T[] }[] {
  const groups = new Map<string, T[]>();
  for (const f of failures) {
    const lines = (f.error ?? "").trim().split("\n");
    const key = (lines[lines.length - 1] || "(no message)").replace(/\d+(\.\d+)?/g, "#");
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  return [...groups.entries()]
    .map(([error, units]) => ({ error, units }))
    .sort((a, b) => b.units.length - a.units.length);
}

// The Editor's workflow and its YAML: the YAML it writes is a workflow `simrun run` runs
// unchanged; a YAML written by hand (the examples) opens with a layout made up from its
// graph. Node positions are kept in one comment line (LAYOUT_MARK), which the runner
// ignores as it ignores every comment. Pure: tested in workflowYaml.test.ts.
import { parse, stringify } from "yaml";

export const LAYOUT_MARK = "# simrun-editor-layout:";

export interface Point {
  x: number;
  y: number;
}

export interface EditorTask {
  name: string;
  type: string;
  settings: Record<string, unknown>;
  inputs: Record<string, string>;
  resources?: Record<string, number>;
  /** Other fields of the task as written (retries, timeout_s...), kept as they are. */
  extra?: Record<string, unknown>;
  position: Point;
}

export interface EditorSource {
  name: string;
  path: string;
  position: Point;
}

export interface EditorWorkflow {
  name?: string;
  sources: EditorSource[];
  tasks: EditorTask[];
}

const TASK_FIELDS = new Set(["name", "type", "settings", "inputs", "resources"]);

/** The input reference of a task's output port, or of a source. */
export function taskRef(task: string, port: string): string {
  return `${task}.${port}`;
}
export function sourceRef(source: string): string {
  return `source:${source}`;
}

/** What an input reference points at: a task's port or a source; null when neither. */
export function parseRef(ref: string): { task?: string; port?: string; source?: string } | null {
  if (ref.startsWith("source:")) return ref.length > 7 ? { source: ref.slice(7) } : null;
  const dot = ref.lastIndexOf(".");
  if (dot <= 0 || dot === ref.length - 1) return null;
  return { task: ref.slice(0, dot), port: ref.slice(dot + 1) };
}

/** The document as plain data, in the order a hand-written one has its keys. */
export function toDocument(wf: EditorWorkflow): Record<string, unknown> {
  const doc: Record<string, unknown> = {};
  if (wf.name) doc.name = wf.name;
  if (wf.sources.length) doc.sources = Object.fromEntries(wf.sources.map((s) => [s.name, s.path]));
  doc.tasks = wf.tasks.map((t) => {
    const out: Record<string, unknown> = { name: t.name, type: t.type };
    if (Object.keys(t.settings).length) out.settings = t.settings;
    if (Object.keys(t.inputs).length) out.inputs = t.inputs;
    if (t.resources && Object.keys(t.resources).length) out.resources = t.resources;
    Object.assign(out, t.extra ?? {});
    return out;
  });
  return doc;
}

/** The YAML the Editor writes: the document, then the layout in one comment line. */
export function toYaml(wf: EditorWorkflow): string {
  const layout = {
    tasks: Object.fromEntries(
      wf.tasks.map((t) => [t.name, [Math.round(t.position.x), Math.round(t.position.y)]]),
    ),
    sources: Object.fromEntries(
      wf.sources.map((s) => [s.name, [Math.round(s.position.x), Math.round(s.position.y)]]),
    ),
  };
  const body = stringify(toDocument(wf), { lineWidth: 0 });
  return `${body}${LAYOUT_MARK} ${JSON.stringify(layout)}\n`;
}

function readLayout(
  text: string,
): { tasks: Record<string, number[]>; sources: Record<string, number[]> } | null {
  for (const line of text.split("\n")) {
    if (line.startsWith(LAYOUT_MARK)) {
      try {
        const found = JSON.parse(line.slice(LAYOUT_MARK.length));
        return { tasks: found.tasks ?? {}, sources: found.sources ?? {} };
      } catch {
        return null; // a damaged layout line: the layout is made up again
      }
    }
  }
  return null;
}

/** Columns by depth along the graph: sources first, then each task right of its inputs. */
export function autoLayout(wf: EditorWorkflow): EditorWorkflow {
  const byName = new Map(wf.tasks.map((t) => [t.name, t]));
  const depth = new Map<string, number>();
  const visiting = new Set<string>();
  const depthOf = (name: string): number => {
    const known = depth.get(name);
    if (known !== undefined) return known;
    if (visiting.has(name)) return 1; // a cycle: validation names it
    visiting.add(name);
    let d = 1;
    for (const ref of Object.values(byName.get(name)?.inputs ?? {})) {
      const target = parseRef(ref);
      if (target?.task && byName.has(target.task)) d = Math.max(d, depthOf(target.task) + 1);
    }
    visiting.delete(name);
    depth.set(name, d);
    return d;
  };
  const rows = new Map<number, number>();
  const place = (column: number): Point => {
    const row = rows.get(column) ?? 0;
    rows.set(column, row + 1);
    return { x: 40 + column * 280, y: 40 + row * 160 };
  };
  return {
    ...wf,
    sources: wf.sources.map((s) => ({ ...s, position: place(0) })),
    tasks: wf.tasks.map((t) => ({ ...t, position: place(depthOf(t.name)) })),
  };
}

/** A workflow YAML as the Editor's workflow; `Error` with a message when it is no
 * workflow (the service's check names problems of its content). */
export function fromYaml(text: string): EditorWorkflow {
  const doc = parse(text);
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    throw new Error("the YAML is not a workflow (a mapping with tasks)");
  }
  const rawTasks = Array.isArray(doc.tasks) ? doc.tasks : [];
  const rawSources = doc.sources && typeof doc.sources === "object" ? doc.sources : {};
  const zero = { x: 0, y: 0 };
  const wf: EditorWorkflow = {
    name: typeof doc.name === "string" ? doc.name : undefined,
    sources: Object.entries(rawSources).map(([name, path]) => ({ name, path: String(path), position: zero })),
    tasks: rawTasks.map((t: Record<string, any>) => {
      const extra = Object.fromEntries(Object.entries(t).filter(([k]) => !TASK_FIELDS.has(k)));
      const task: EditorTask = {
        name: String(t.name ?? ""),
        type: String(t.type ?? ""),
        settings: { ...(t.settings ?? {}) },
        inputs: { ...(t.inputs ?? {}) },
        position: zero,
      };
      if (t.resources) task.resources = { ...t.resources };
      if (Object.keys(extra).length) task.extra = extra;
      return task;
    }),
  };
  const layout = readLayout(text);
  const laid = autoLayout(wf);
  if (!layout) return laid;
  const at = (p: number[] | undefined, fallback: Point): Point =>
    Array.isArray(p) && p.length === 2 ? { x: Number(p[0]), y: Number(p[1]) } : fallback;
  return {
    ...laid,
    sources: laid.sources.map((s) => ({ ...s, position: at(layout.sources[s.name], s.position) })),
    tasks: laid.tasks.map((t) => ({ ...t, position: at(layout.tasks[t.name], t.position) })),
  };
}

/** A new task name for ``type`` that no task has yet (heat, heat2, ...). */
export function freshName(type: string, taken: Iterable<string>): string {
  const used = new Set(taken);
  const base = type.replace(/[^A-Za-z0-9_]/g, "_").replace(/^([^A-Za-z_])/, "_$1") || "task";
  if (!used.has(base)) return base;
  for (let i = 2; ; i++) if (!used.has(`${base}${i}`)) return `${base}${i}`;
}

/** The workflow with task ``from`` renamed ``to``, the inputs that read it following. */
export function renameTask(wf: EditorWorkflow, from: string, to: string): EditorWorkflow {
  return {
    ...wf,
    tasks: wf.tasks.map((t) => ({
      ...t,
      name: t.name === from ? to : t.name,
      inputs: Object.fromEntries(
        Object.entries(t.inputs).map(([port, ref]) => {
          const target = parseRef(ref);
          return [port, target?.task === from ? taskRef(to, target.port as string) : ref];
        }),
      ),
    })),
  };
}

/** The workflow without task ``name``; the inputs that read it are disconnected. */
export function removeTask(wf: EditorWorkflow, name: string): EditorWorkflow {
  return {
    ...wf,
    tasks: wf.tasks
      .filter((t) => t.name !== name)
      .map((t) => ({
        ...t,
        inputs: Object.fromEntries(
          Object.entries(t.inputs).filter(([, ref]) => parseRef(ref)?.task !== name),
        ),
      })),
  };
}

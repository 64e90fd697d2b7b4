import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  Background,
  Controls,
  Handle,
  Position,
  ReactFlow,
  ReactFlowProvider,
  useReactFlow,
  type Connection,
  type Edge,
  type EdgeChange,
  type Node,
  type NodeChange,
} from "@xyflow/react";
import { ApiError, getJson, postJson } from "../api";
import { SettingsForm } from "../components/SettingsForm";
import { count, duration, gb } from "../format";
import { schemaFields } from "../schemaForm";
import {
  autoLayout,
  freshName,
  fromYaml,
  parseRef,
  removeTask,
  renameTask,
  sourceRef,
  taskRef,
  toYaml,
  type EditorWorkflow,
  type Point,
} from "../workflowYaml";

interface TypeInfo {
  name: string;
  description: string;
  package: string;
  inputs: string[];
  outputs: string[];
  splittable: boolean;
  settings_schema: Record<string, any>;
}

interface Problem {
  loc: (string | number)[];
  task: string | null;
  where: string;
  line: number | null;
  message: string;
}

interface Upload {
  filename: string;
  content_b64: string;
}

const EMPTY: EditorWorkflow = { name: "my-workflow", sources: [], tasks: [] };
const DRAFT_KEY = "simrun-editor-draft";

function TaskNode(props: { data: any; selected?: boolean }): JSX.Element {
  const { task, info, problems } = props.data;
  return (
    <div
      className={`task-node ${problems.length ? "invalid" : ""} ${props.selected ? "selected" : ""}`}
      aria-label={`task ${task.name}`}
    >
      <div className="node-title">
        <strong>{task.name}</strong> <span className="muted small">{task.type}</span>
      </div>
      <div className="ports">
        <div>
          {(info?.inputs ?? []).map((port: string) => (
            <div className="port in" key={port}>
              <Handle
                type="target"
                position={Position.Left}
                id={port}
                aria-label={`input ${port} of ${task.name}`}
              />
              {port}
            </div>
          ))}
        </div>
        <div>
          {(info?.outputs ?? []).map((port: string) => (
            <div className="port out" key={port}>
              {port}
              <Handle
                type="source"
                position={Position.Right}
                id={port}
                aria-label={`output ${port} of ${task.name}`}
              />
            </div>
          ))}
        </div>
      </div>
      {problems.length > 0 && (
        <div className="node-errors" role="alert">
          {problems.map((p: Problem, i: number) => (
            <div key={i}>{p.message}</div>
          ))}
        </div>
      )}
    </div>
  );
}

function SourceNode(props: { data: any; selected?: boolean }): JSX.Element {
  const { source, uploaded } = props.data;
  return (
    <div
      className={`source-node ${uploaded ? "" : "invalid"} ${props.selected ? "selected" : ""}`}
      aria-label={`source ${source.name}`}
    >
      <strong>{source.name}</strong>
      <div className="muted small">{uploaded ? uploaded.filename : `${source.path} — not uploaded`}</div>
      <Handle
        type="source"
        position={Position.Right}
        id="source"
        aria-label={`output of source ${source.name}`}
      />
    </div>
  );
}

const nodeTypes = { task: TaskNode, source: SourceNode };

function Palette(props: { types: TypeInfo[]; onAdd: (type: string) => void }): JSX.Element {
  const [search, setSearch] = useState("");
  const shown = props.types.filter((t) =>
    `${t.name} ${t.description} ${t.package}`.toLowerCase().includes(search.trim().toLowerCase()),
  );
  const packages = [...new Set(shown.map((t) => t.package))].sort();
  return (
    <aside className="palette" aria-label="palette">
      <input
        type="search"
        aria-label="search task types"
        placeholder="Search types"
        value={search}
        onChange={(e) => setSearch(e.target.value)}
      />
      {packages.map((pkg) => (
        <div key={pkg}>
          <h4>{pkg}</h4>
          <ul>
            {shown
              .filter((t) => t.package === pkg)
              .map((t) => (
                <li
                  key={t.name}
                  tabIndex={0}
                  role="button"
                  draggable
                  aria-label={`type ${t.name}`}
                  className="palette-item"
                  onDragStart={(e) => {
                    e.dataTransfer.setData("application/simrun-type", t.name);
                    e.dataTransfer.effectAllowed = "move";
                  }}
                  onKeyDown={(e) => {
                    if (e.key === "Enter" || e.key === " ") {
                      e.preventDefault();
                      props.onAdd(t.name);
                    }
                  }}
                  onDoubleClick={() => props.onAdd(t.name)}
                >
                  <b>{t.name}</b>
                  <div className="muted small">{t.description}</div>
                </li>
              ))}
          </ul>
        </div>
      ))}
      {shown.length === 0 && <p className="muted small">No type matches.</p>}
    </aside>
  );
}

function readBase64(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] ?? "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function EditorCanvas(props: { fromRun?: string }): JSX.Element {
  const [types, setTypes] = useState<TypeInfo[]>([]);
  const [wf, setWf] = useState<EditorWorkflow>(() => {
    const draft = sessionStorage.getItem(DRAFT_KEY);
    try {
      return draft ? fromYaml(draft) : EMPTY;
    } catch {
      return EMPTY;
    }
  });
  const [selected, setSelected] = useState<string | null>(null);
  const [problems, setProblems] = useState<Problem[] | null>(null);
  const [forecast, setForecast] = useState<any>(null);
  const [uploads, setUploads] = useState<Record<string, Upload>>({});
  const [yamlText, setYamlText] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const flow = useReactFlow();
  const wrapper = useRef<HTMLDivElement>(null);
  const byType = useMemo(() => new Map(types.map((t) => [t.name, t])), [types]);

  useEffect(() => {
    getJson<TypeInfo[]>("/dashboard/types")
      .then(setTypes)
      .catch(() => setTypes([]));
  }, []);
  useEffect(() => sessionStorage.setItem(DRAFT_KEY, toYaml(wf)), [wf]);
  // #/editor/RUN: the workflow of an earlier run, to change and run again.
  useEffect(() => {
    if (!props.fromRun) return;
    getJson(`/runs/${encodeURIComponent(props.fromRun)}/document`)
      .then((d) => {
        setWf(fromYaml(d.workflow));
        setSelected(null);
        setMessage(`opened the workflow of run ${props.fromRun}`);
      })
      .catch((e: Error) => setMessage(e.message));
  }, [props.fromRun]);

  const check = useCallback(
    async (withForecast: boolean) => {
      const answer = await postJson("/dashboard/check", {
        workflow: toYaml(wf),
        sources: Object.keys(uploads),
        forecast: withForecast,
      });
      setProblems(answer.errors);
      setForecast(withForecast ? (answer.forecast ?? null) : null);
      return answer;
    },
    [wf, uploads],
  );
  // Validation follows the edits (the service's own check, the messages of `simrun validate`).
  useEffect(() => {
    if (!wf.tasks.length) {
      setProblems(null);
      return;
    }
    const timer = setTimeout(() => void check(false).catch(() => undefined), 400);
    return () => clearTimeout(timer);
  }, [wf, uploads]); // eslint-disable-line react-hooks/exhaustive-deps

  const taskProblems = (name: string) => (problems ?? []).filter((p) => p.task === name);
  const general = (problems ?? []).filter((p) => !p.task);

  const nodes: Node[] = [
    ...wf.sources.map((s) => ({
      id: `source:${s.name}`,
      type: "source",
      position: s.position,
      selected: selected === `source:${s.name}`,
      data: { source: s, uploaded: uploads[s.name] },
    })),
    ...wf.tasks.map((t) => ({
      id: `task:${t.name}`,
      type: "task",
      position: t.position,
      selected: selected === `task:${t.name}`,
      data: { task: t, info: byType.get(t.type), problems: taskProblems(t.name) },
    })),
  ];
  const edges: Edge[] = wf.tasks.flatMap((t) =>
    Object.entries(t.inputs).flatMap(([port, ref]) => {
      const target = parseRef(ref);
      if (!target) return [];
      const source = target.source ? `source:${target.source}` : `task:${target.task}`;
      return [
        {
          id: `${t.name}.${port}`,
          source,
          sourceHandle: target.source ? "source" : target.port,
          target: `task:${t.name}`,
          targetHandle: port,
        },
      ];
    }),
  );

  const addTask = (type: string, at?: Point) => {
    setWf((w) => {
      const name = freshName(
        type,
        w.tasks.map((t) => t.name),
      );
      const position = at ?? { x: 80 + 40 * (w.tasks.length % 6), y: 60 + 140 * w.tasks.length };
      setSelected(`task:${name}`);
      return { ...w, tasks: [...w.tasks, { name, type, settings: {}, inputs: {}, position }] };
    });
  };
  const addSource = () => {
    setWf((w) => {
      const name = freshName(
        "model",
        w.sources.map((s) => s.name),
      );
      setSelected(`source:${name}`);
      return {
        ...w,
        sources: [
          ...w.sources,
          { name, path: `${name}.dat`, position: { x: 0, y: 40 + 120 * w.sources.length } },
        ],
      };
    });
  };
  const removeNode = (id: string) => {
    if (id.startsWith("task:")) setWf((w) => removeTask(w, id.slice(5)));
    else {
      const name = id.slice(7);
      setWf((w) => ({
        ...w,
        sources: w.sources.filter((s) => s.name !== name),
        tasks: w.tasks.map((t) => ({
          ...t,
          inputs: Object.fromEntries(Object.entries(t.inputs).filter(([, r]) => r !== sourceRef(name))),
        })),
      }));
    }
    setSelected(null);
  };
  const onNodesChange = (changes: NodeChange[]) => {
    for (const c of changes) {
      if (c.type === "position" && c.position) {
        const pos = c.position;
        setWf((w) => ({
          ...w,
          tasks: w.tasks.map((t) => (`task:${t.name}` === c.id ? { ...t, position: pos } : t)),
          sources: w.sources.map((s) => (`source:${s.name}` === c.id ? { ...s, position: pos } : s)),
        }));
      } else if (c.type === "select") {
        if (c.selected) setSelected(c.id);
        else setSelected((s) => (s === c.id ? null : s));
      } else if (c.type === "remove") removeNode(c.id);
    }
  };
  const onEdgesChange = (changes: EdgeChange[]) => {
    for (const c of changes) {
      if (c.type !== "remove") continue;
      const [task, port] = [c.id.slice(0, c.id.lastIndexOf(".")), c.id.slice(c.id.lastIndexOf(".") + 1)];
      setWf((w) => ({
        ...w,
        tasks: w.tasks.map((t) =>
          t.name === task
            ? { ...t, inputs: Object.fromEntries(Object.entries(t.inputs).filter(([p]) => p !== port)) }
            : t,
        ),
      }));
    }
  };
  const onConnect = (c: Connection) => {
    if (!c.targetHandle || !c.target.startsWith("task:")) return;
    const ref = c.source.startsWith("source:")
      ? sourceRef(c.source.slice(7))
      : taskRef(c.source.slice(5), c.sourceHandle ?? "");
    const target = c.target.slice(5);
    const port = c.targetHandle;
    setWf((w) => ({
      ...w,
      tasks: w.tasks.map((t) => (t.name === target ? { ...t, inputs: { ...t.inputs, [port]: ref } } : t)),
    }));
  };
  const onDrop = (e: React.DragEvent) => {
    e.preventDefault();
    const type = e.dataTransfer.getData("application/simrun-type");
    if (!type) return;
    addTask(type, flow.screenToFlowPosition({ x: e.clientX, y: e.clientY }));
  };

  const run = async () => {
    setMessage(null);
    try {
      const answer = await check(false);
      if (!answer.ok) {
        setMessage("fix the problems first");
        return;
      }
      const sources = Object.fromEntries(wf.sources.map((s) => [s.name, uploads[s.name]]));
      const created = await postJson("/runs", { workflow: toYaml(wf), sources });
      window.location.hash = `#/runs/${created.run}`;
    } catch (e) {
      if (e instanceof ApiError && e.body?.errors) setProblems(e.body.errors);
      setMessage(e instanceof Error ? e.message : String(e));
    }
  };
  const exportYaml = () => {
    const text = toYaml(wf);
    setYamlText(text);
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([text], { type: "text/yaml" }));
    link.download = `${wf.name || "workflow"}.yaml`;
    link.click();
  };
  const importYaml = (text: string) => {
    try {
      setWf(fromYaml(text));
      setSelected(null);
      setYamlText(null);
      setMessage(null);
    } catch (e) {
      setMessage(e instanceof Error ? e.message : String(e));
    }
  };

  const task = selected?.startsWith("task:")
    ? wf.tasks.find((t) => `task:${t.name}` === selected)
    : undefined;
  const source = selected?.startsWith("source:")
    ? wf.sources.find((s) => `source:${s.name}` === selected)
    : undefined;
  const info = task ? byType.get(task.type) : undefined;
  const fields = info ? schemaFields(info.settings_schema) : [];
  const fieldErrors: Record<string, string> = {};
  if (task) {
    const i = wf.tasks.indexOf(task);
    for (const p of problems ?? []) {
      if (p.loc[0] === "tasks" && p.loc[1] === i && p.loc[2] === "settings" && p.loc.length > 3) {
        fieldErrors[String(p.loc[3])] = p.message;
      }
    }
  }
  const setTask = (update: (t: EditorWorkflow["tasks"][number]) => EditorWorkflow["tasks"][number]) =>
    setWf((w) => ({ ...w, tasks: w.tasks.map((t) => (t === task ? update(t) : t)) }));

  return (
    <div className="editor">
      <Palette types={types} onAdd={(t) => addTask(t)} />
      <div className="canvas-column">
        <div className="toolbar">
          <input
            aria-label="workflow name"
            value={wf.name ?? ""}
            onChange={(e) => setWf({ ...wf, name: e.target.value })}
          />
          <button onClick={addSource}>Add source</button>
          <button
            onClick={() => {
              setWf((w) => autoLayout(w));
              setTimeout(() => void flow.fitView({ maxZoom: 1 }), 50);
            }}
          >
            Arrange
          </button>
          <button onClick={() => void check(false)}>Validate</button>
          <button onClick={() => void check(true)}>Forecast</button>
          <button className="primary" onClick={() => void run()}>
            Run
          </button>
          <button onClick={exportYaml}>Export YAML</button>
          <button onClick={() => setYamlText(yamlText === null ? "" : null)}>Import YAML</button>
          <span className="status" role="status">
            {problems === null ? "" : problems.length ? `${problems.length} problem(s)` : "valid"}
            {message ? ` · ${message}` : ""}
          </span>
        </div>
        {yamlText !== null && (
          <div className="yaml-box">
            <textarea
              aria-label="workflow yaml"
              value={yamlText}
              onChange={(e) => setYamlText(e.target.value)}
              rows={10}
            />
            <div>
              <button onClick={() => importYaml(yamlText)}>Open this YAML</button>
              <input
                type="file"
                aria-label="open yaml file"
                accept=".yaml,.yml"
                onChange={async (e) => {
                  const f = e.target.files?.[0];
                  if (f) importYaml(await f.text());
                }}
              />
            </div>
          </div>
        )}
        {general.length > 0 && (
          <ul className="errors" role="alert">
            {general.map((p, i) => (
              <li key={i}>
                {p.where}: {p.message}
              </li>
            ))}
          </ul>
        )}
        <div
          className="canvas"
          ref={wrapper}
          onDragOver={(e) => {
            e.preventDefault();
            e.dataTransfer.dropEffect = "move";
          }}
          onDrop={onDrop}
          aria-label="canvas"
        >
          <ReactFlow
            nodes={nodes}
            edges={edges}
            nodeTypes={nodeTypes}
            onNodesChange={onNodesChange}
            onEdgesChange={onEdgesChange}
            onConnect={onConnect}
            deleteKeyCode={["Delete", "Backspace"]}
            fitView
            proOptions={{ hideAttribution: true }}
          >
            <Background />
            <Controls />
          </ReactFlow>
        </div>
        {forecast && (
          <div className="scroll">
            <table className="forecast" aria-label="forecast">
              <thead>
                <tr>
                  <th>Task</th>
                  <th>Units</th>
                  <th>Memory / process</th>
                  <th>From</th>
                  <th>Core-hours</th>
                  <th>ETA</th>
                  <th></th>
                </tr>
              </thead>
              <tbody>
                {forecast.tasks.map((t: any) => (
                  <tr key={t.task}>
                    <td>{t.task}</td>
                    <td>{count(t.units)}</td>
                    <td>{gb(t.memory_per_worker_gb)}</td>
                    <td>{t.memory_source}</td>
                    <td>{t.core_hours === null ? "—" : t.core_hours.toPrecision(2)}</td>
                    <td>{duration(t.eta_s)}</td>
                    <td className="bad small">{t.problem}</td>
                  </tr>
                ))}
              </tbody>
            </table>
            <p className="small">
              On the live pool ({forecast.pool.workers} worker(s), {forecast.pool.processes} processes): ETA{" "}
              {duration(forecast.eta_s)},{" "}
              {forecast.core_hours === null ? "—" : forecast.core_hours.toPrecision(2)} core-hours
            </p>
          </div>
        )}
      </div>
      <aside className="side" aria-label="settings panel">
        {!task && !source && (
          <p className="muted">
            Select a task to edit it; drag a type from the palette (or press Enter on it) to add one.
          </p>
        )}
        {task && (
          <>
            <h3>{task.type}</h3>
            <p className="muted small">{info?.description}</p>
            <div className="field">
              <label htmlFor="task-name">name</label>
              <input
                id="task-name"
                key={task.name}
                defaultValue={task.name}
                onBlur={(e) => {
                  const to = e.target.value.trim();
                  if (to && to !== task.name && !wf.tasks.some((t) => t.name === to)) {
                    setWf((w) => renameTask(w, task.name, to));
                    setSelected(`task:${to}`);
                  }
                }}
              />
            </div>
            {taskProblems(task.name)
              .filter((p) => !(p.loc[2] === "settings" && p.loc.length > 3))
              .map((p, i) => (
                <div key={i} className="error small" role="alert">
                  {p.message}
                </div>
              ))}
            <h4>Settings</h4>
            <SettingsForm
              idPrefix={`setting-${task.name}`}
              fields={fields}
              values={task.settings}
              errors={fieldErrors}
              onChange={(name, value) =>
                setTask((t) => {
                  const settings = { ...t.settings };
                  if (value === undefined) delete settings[name];
                  else settings[name] = value;
                  return { ...t, settings };
                })
              }
            />
            <h4>Resources (override)</h4>
            {(["memory_per_worker_gb", "memory_base_gb", "scratch_gb", "gpus"] as const).map((k) => (
              <div className="field" key={k}>
                <label htmlFor={`res-${k}`}>{k}</label>
                <input
                  id={`res-${k}`}
                  inputMode="decimal"
                  placeholder="learned or the hint"
                  defaultValue={task.resources?.[k] ?? ""}
                  key={`${task.name}-${k}`}
                  onBlur={(e) => {
                    const v = e.target.value.trim();
                    setTask((t) => {
                      const resources = { ...(t.resources ?? {}) };
                      if (v === "" || !Number.isFinite(Number(v))) delete resources[k];
                      else resources[k] = Number(v);
                      return { ...t, resources: Object.keys(resources).length ? resources : undefined };
                    });
                  }}
                />
              </div>
            ))}
            <button onClick={() => removeNode(`task:${task.name}`)}>Delete task</button>
          </>
        )}
        {source && (
          <>
            <h3>Source {source.name}</h3>
            <div className="field">
              <label htmlFor="source-file">file</label>
              <input
                id="source-file"
                type="file"
                onChange={async (e) => {
                  const f = e.target.files?.[0];
                  if (!f) return;
                  const content_b64 = await readBase64(f);
                  setUploads((u) => ({ ...u, [source.name]: { filename: f.name, content_b64 } }));
                  setWf((w) => ({
                    ...w,
                    sources: w.sources.map((s) => (s === source ? { ...s, path: f.name } : s)),
                  }));
                }}
              />
              <div className="muted small">
                {uploads[source.name] ? `uploaded: ${uploads[source.name].filename}` : "not uploaded yet"}
              </div>
            </div>
            <button onClick={() => removeNode(`source:${source.name}`)}>Delete source</button>
          </>
        )}
      </aside>
    </div>
  );
}

export function EditorPage(props: { fromRun?: string }): JSX.Element {
  return (
    <ReactFlowProvider>
      <EditorCanvas fromRun={props.fromRun} />
    </ReactFlowProvider>
  );
}

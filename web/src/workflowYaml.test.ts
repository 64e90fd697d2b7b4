import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { LAYOUT_MARK, freshName, fromYaml, parseRef, removeTask, renameTask, toYaml } from "./workflowYaml";

const here = dirname(fileURLToPath(import.meta.url));
const HEAT = readFileSync(resolve(here, "../../examples/heat.yaml"), "utf8");

describe("YAML round trip", () => {
  it("opens the heat example with a layout made from its graph", () => {
    const wf = fromYaml(HEAT);
    expect(wf.name).toBe("heat-demo");
    expect(wf.sources.map((s) => [s.name, s.path])).toEqual([["plate", "plate.json"]]);
    expect(wf.tasks.map((t) => t.name)).toEqual(["sweep", "summary"]);
    const [sweep, summary] = wf.tasks;
    expect(sweep.position.x).toBeLessThan(summary.position.x); // summary reads sweep
    expect(wf.sources[0].position.x).toBeLessThan(sweep.position.x);
  });

  it("writes a document equal to the example's (comments aside)", () => {
    const written = toYaml(fromYaml(HEAT));
    expect(parse(written)).toEqual(parse(HEAT));
    expect(written).toContain(LAYOUT_MARK);
  });

  it("keeps the positions through its layout comment", () => {
    const wf = fromYaml(HEAT);
    wf.tasks[1].position = { x: 900, y: 333 };
    const again = fromYaml(toYaml(wf));
    expect(again.tasks[1].position).toEqual({ x: 900, y: 333 });
    expect(toYaml(again)).toBe(toYaml(wf));
  });

  it("keeps the fields the Editor does not edit (retries, timeout_s)", () => {
    const text =
      "tasks:\n  - name: a\n    type: t\n    retries: 1\n    timeout_s: 5\n    resources:\n      memory_per_worker_gb: 2\n";
    expect(parse(toYaml(fromYaml(text)))).toEqual(parse(text));
  });

  it("refuses a YAML that is no mapping", () => {
    expect(() => fromYaml("- a\n- b\n")).toThrow(/not a workflow/);
  });

  it("makes up a layout when the layout comment is damaged", () => {
    const wf = fromYaml(`${HEAT}\n${LAYOUT_MARK} {oops\n`);
    expect(wf.tasks[0].position.x).toBeGreaterThan(0);
  });
});

describe("editing the graph", () => {
  it.each([
    ["sweep.out", { task: "sweep", port: "out" }],
    ["source:plate", { source: "plate" }],
    ["a.b.c", { task: "a.b", port: "c" }],
    ["nodot", null],
    ["source:", null],
  ])("parseRef(%j)", (ref, expected) => {
    expect(parseRef(ref)).toEqual(expected);
  });

  it("renames a task and the inputs that read it", () => {
    const wf = renameTask(fromYaml(HEAT), "sweep", "scan");
    expect(wf.tasks.map((t) => t.name)).toEqual(["scan", "summary"]);
    expect(wf.tasks[1].inputs).toEqual({ table: "scan.out" });
  });

  it("removes a task and disconnects its readers", () => {
    const wf = removeTask(fromYaml(HEAT), "sweep");
    expect(wf.tasks.map((t) => t.name)).toEqual(["summary"]);
    expect(wf.tasks[0].inputs).toEqual({});
  });

  it.each([
    ["heat", [], "heat"],
    ["heat", ["heat"], "heat2"],
    ["heat", ["heat", "heat2"], "heat3"],
    ["svc-work", [], "svc_work"],
  ])("freshName(%j, %j) is %j", (type, taken, expected) => {
    expect(freshName(type, taken)).toBe(expected);
  });
});

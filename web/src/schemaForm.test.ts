import { describe, expect, it } from "vitest";
import { parseValue, schemaFields, settingsOf, showValue } from "./schemaForm";

// The schema pydantic gives for the heat example's settings, cut down.
const HEAT = {
  title: "HeatSettings",
  type: "object",
  $defs: { Scheme: { enum: ["explicit", "implicit"], title: "Scheme", type: "string" } },
  properties: {
    grid: { default: 64, description: "cells per side", title: "Grid", type: "integer", minimum: 4 },
    diffusivities: { items: { type: "number" }, title: "Diffusivities", type: "array" },
    duration: { default: 0.25, title: "Duration", type: "number" },
    scheme: { $ref: "#/$defs/Scheme", default: "explicit" },
    label: { anyOf: [{ type: "string" }, { type: "null" }], default: null, title: "Label" },
    verbose: { default: false, title: "Verbose", type: "boolean" },
    extra: { type: "object", title: "Extra" },
  },
  required: ["diffusivities"],
};

describe("schemaFields: a settings schema as form fields", () => {
  const fields = schemaFields(HEAT);
  const byName = Object.fromEntries(fields.map((f) => [f.name, f]));

  it("keeps the schema's order, titles, defaults and descriptions", () => {
    expect(fields.map((f) => f.name)).toEqual([
      "grid",
      "diffusivities",
      "duration",
      "scheme",
      "label",
      "verbose",
      "extra",
    ]);
    expect(byName.grid).toMatchObject({
      kind: "integer",
      default: 64,
      description: "cells per side",
      minimum: 4,
    });
    expect(byName.duration.kind).toBe("number");
  });

  it.each([
    ["diffusivities", "list", true],
    ["scheme", "enum", false],
    ["label", "string", false],
    ["verbose", "boolean", false],
    ["extra", "json", false],
  ])("field %s is a %s (required: %s)", (name, kind, required) => {
    expect(byName[name].kind).toBe(kind);
    expect(byName[name].required).toBe(required);
  });

  it("follows $ref to an enum's options", () => {
    expect(byName.scheme.options).toEqual(["explicit", "implicit"]);
    expect(byName.diffusivities.items).toBe("number");
  });
});

describe("parseValue and showValue: a form's text and a setting's value", () => {
  const fields = Object.fromEntries(schemaFields(HEAT).map((f) => [f.name, f]));
  it.each([
    ["grid", "128", { value: 128 }],
    ["grid", "1.5", { error: "1.5 is not an integer" }],
    ["duration", "abc", { error: '"abc" is not a number' }],
    ["diffusivities", "0.1, 0.3,1", { value: [0.1, 0.3, 1] }],
    ["diffusivities", "0.1, x", { error: '"x" is not a number' }],
    ["scheme", "implicit", { value: "implicit" }],
    ["verbose", "true", { value: true }],
    ["extra", '{"a": 1}', { value: { a: 1 } }],
    ["extra", "{a", { error: "not valid JSON" }],
    ["grid", "  ", {}],
  ])("%s given %j gives %j", (name, text, expected) => {
    expect(parseValue(fields[name], text)).toEqual(expected);
  });

  it("shows lists as comma-separated and an unset field as its default", () => {
    expect(showValue(fields.diffusivities, [0.1, 3])).toBe("0.1, 3");
    expect(showValue(fields.grid, undefined)).toBe("64");
    expect(showValue(fields.label, undefined)).toBe("");
  });

  it("writes only the set values, in the schema's order", () => {
    const fs = schemaFields(HEAT);
    expect(Object.keys(settingsOf(fs, { duration: 1, grid: 8 }))).toEqual(["grid", "duration"]);
  });
});

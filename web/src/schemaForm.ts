// A type's settings schema (pydantic's JSON schema) as the fields of a form, and the
// values a form gives back as settings. Pure: tested in schemaForm.test.ts.

export type FieldKind = "number" | "integer" | "boolean" | "enum" | "string" | "list" | "json";

export interface Field {
  name: string;
  title: string;
  kind: FieldKind;
  description?: string;
  default?: unknown;
  required: boolean;
  options?: unknown[];
  /** The kind of the items of a list ("number", "integer", "string"). */
  items?: FieldKind;
  minimum?: number;
  maximum?: number;
}

type Schema = Record<string, any>;

function deref(schema: Schema, root: Schema): Schema {
  const ref = schema.$ref as string | undefined;
  if (!ref) return schema;
  const name = ref.split("/").pop() as string;
  return (root.$defs ?? root.definitions ?? {})[name] ?? {};
}

/** The non-null branch of ``anyOf: [X, {type: null}]`` (an Optional field). */
function unwrap(schema: Schema, root: Schema): Schema {
  const plain = deref(schema, root);
  const branches = plain.anyOf as Schema[] | undefined;
  if (!branches) return plain;
  const real = branches.filter((b) => b.type !== "null");
  if (real.length === 1) return { ...plain, ...deref(real[0], root), anyOf: undefined };
  return plain;
}

function kindOf(schema: Schema): FieldKind {
  if (Array.isArray(schema.enum)) return "enum";
  if (schema.const !== undefined) return "enum";
  switch (schema.type) {
    case "number":
      return "number";
    case "integer":
      return "integer";
    case "boolean":
      return "boolean";
    case "string":
      return "string";
    case "array": {
      const item = schema.items?.type;
      return item === "number" || item === "integer" || item === "string" ? "list" : "json";
    }
    default:
      return "json";
  }
}

/** The fields of a settings schema, in its order. */
export function schemaFields(root: Schema): Field[] {
  const properties: Record<string, Schema> = root.properties ?? {};
  const required = new Set<string>(root.required ?? []);
  return Object.entries(properties).map(([name, raw]) => {
    const schema = unwrap(raw, root);
    const kind = kindOf(schema);
    const field: Field = {
      name,
      title: raw.title ?? schema.title ?? name,
      kind,
      description: raw.description ?? schema.description,
      default: raw.default ?? schema.default,
      required: required.has(name),
    };
    if (kind === "enum") field.options = schema.enum ?? [schema.const];
    if (kind === "list") field.items = kindOf(schema.items) as FieldKind;
    if (typeof schema.minimum === "number") field.minimum = schema.minimum;
    if (typeof schema.maximum === "number") field.maximum = schema.maximum;
    return field;
  });
}

/** What a form shows for a field's value (its default when not set). */
export function showValue(field: Field, value: unknown): string {
  const shown = value === undefined ? field.default : value;
  if (shown === undefined || shown === null) return "";
  if (field.kind === "list") return (shown as unknown[]).join(", ");
  if (field.kind === "json") return JSON.stringify(shown);
  return String(shown);
}

export interface Parsed {
  value?: unknown;
  error?: string;
}

/** A form's text as the field's value; an empty text is "not set" (the default). */
export function parseValue(field: Field, text: string): Parsed {
  const trimmed = text.trim();
  if (trimmed === "") return {};
  const number = (t: string, integer: boolean): Parsed => {
    const n = Number(t);
    if (!Number.isFinite(n)) return { error: `${JSON.stringify(t)} is not a number` };
    if (integer && !Number.isInteger(n)) return { error: `${t} is not an integer` };
    return { value: n };
  };
  switch (field.kind) {
    case "number":
      return number(trimmed, false);
    case "integer":
      return number(trimmed, true);
    case "boolean":
      return { value: trimmed === "true" };
    case "enum": {
      const found = (field.options ?? []).find((o) => String(o) === trimmed);
      return found === undefined ? { error: `choose one of ${field.options?.join(", ")}` } : { value: found };
    }
    case "list": {
      const parts = trimmed
        .split(",")
        .map((p) => p.trim())
        .filter((p) => p !== "");
      if (field.items === "string") return { value: parts };
      const values: number[] = [];
      for (const p of parts) {
        const one = number(p, field.items === "integer");
        if (one.error) return one;
        values.push(one.value as number);
      }
      return { value: values };
    }
    case "json":
      try {
        return { value: JSON.parse(trimmed) };
      } catch {
        return { error: "not valid JSON" };
      }
    default:
      return { value: trimmed };
  }
}

/** The settings to write: the set values only, in the schema's order (a default is not
 * repeated, so the YAML stays as short as a hand-written one). */
export function settingsOf(fields: Field[], values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) if (values[f.name] !== undefined) out[f.name] = values[f.name];
  for (const [k, v] of Object.entries(values)) if (!(k in out) && v !== undefined) out[k] = v;
  return out;
}

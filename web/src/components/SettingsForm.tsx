import { useEffect, useState } from "react";
import { parseValue, showValue, type Field } from "../schemaForm";

/** One field of a settings form: its input by kind, its description, and its error (the
 * form's own, or the service's check naming this field). */
function FieldInput(props: {
  field: Field;
  value: unknown;
  error?: string;
  onChange: (value: unknown) => void;
  idPrefix: string;
}): JSX.Element {
  const { field } = props;
  const [text, setText] = useState(showValue(field, props.value));
  const [local, setLocal] = useState<string | undefined>();
  useEffect(
    () => setText(props.value === undefined ? "" : showValue(field, props.value)),
    [props.value, field],
  );
  const id = `${props.idPrefix}-${field.name}`;
  const commit = (t: string) => {
    const parsed = parseValue(field, t);
    setLocal(parsed.error);
    if (!parsed.error) props.onChange(parsed.value);
  };
  const placeholder = field.default === undefined ? "" : `default: ${showValue(field, field.default)}`;
  const error = local ?? props.error;
  let input: JSX.Element;
  if (field.kind === "boolean" || field.kind === "enum") {
    const options = field.kind === "boolean" ? [true, false] : (field.options ?? []);
    input = (
      <select
        id={id}
        value={text}
        onChange={(e) => {
          setText(e.target.value);
          commit(e.target.value);
        }}
      >
        <option value="">{placeholder || "(not set)"}</option>
        {options.map((o) => (
          <option key={String(o)} value={String(o)}>
            {String(o)}
          </option>
        ))}
      </select>
    );
  } else {
    input = (
      <input
        id={id}
        value={text}
        placeholder={placeholder}
        inputMode={field.kind === "number" || field.kind === "integer" ? "decimal" : undefined}
        aria-invalid={error ? true : undefined}
        onChange={(e) => setText(e.target.value)}
        onBlur={(e) => commit(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Enter") commit((e.target as HTMLInputElement).value);
        }}
      />
    );
  }
  return (
    <div className={`field ${error ? "has-error" : ""}`}>
      <label htmlFor={id}>
        {field.title}
        {field.required && " *"}{" "}
        <span className="muted small">{field.kind === "list" ? `list of ${field.items}` : field.kind}</span>
      </label>
      {input}
      {field.description && <div className="muted small">{field.description}</div>}
      {error && (
        <div className="error small" role="alert">
          {error}
        </div>
      )}
    </div>
  );
}

export function SettingsForm(props: {
  fields: Field[];
  values: Record<string, unknown>;
  errors: Record<string, string>;
  onChange: (name: string, value: unknown) => void;
  idPrefix: string;
}): JSX.Element {
  return (
    <div className="form">
      {props.fields.map((f) => (
        <FieldInput
          key={f.name}
          field={f}
          value={props.values[f.name]}
          error={props.errors[f.name]}
          onChange={(v) => props.onChange(f.name, v)}
          idPrefix={props.idPrefix}
        />
      ))}
    </div>
  );
}

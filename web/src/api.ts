// The page's client of the service: the token (asked once, kept in sessionStorage for the
// browser session, sent as a header, never in a URL), JSON routes and event streams.
import { SseParser } from "./sse";

const TOKEN_KEY = "simrun-token";

export class Unauthorized extends Error {}

export class ApiError extends Error {
  constructor(
    public status: number,
    public body: any,
  ) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
  }
}

type Listener = () => void;
const tokenListeners = new Set<Listener>();

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
  tokenListeners.forEach((l) => l());
}
/** Called when a route answered 401: the page asks for the token. */
export function onTokenNeeded(listener: Listener): () => void {
  tokenListeners.add(listener);
  return () => tokenListeners.delete(listener);
}
let needed = false;
export function tokenNeeded(): boolean {
  return needed;
}
function askToken(): void {
  needed = true;
  tokenListeners.forEach((l) => l());
}
export function tokenGiven(): void {
  needed = false;
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const token = getToken();
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

export async function getJson<T = any>(path: string): Promise<T> {
  return request<T>("GET", path);
}

export async function postJson<T = any>(path: string, body: unknown): Promise<T> {
  return request<T>("POST", path, body);
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const answer = await fetch(path, {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (answer.status === 401) {
    askToken();
    throw new Unauthorized("the service needs its token");
  }
  const text = await answer.text();
  const data = text ? JSON.parse(text) : null;
  if (!answer.ok) throw new ApiError(answer.status, data);
  return data as T;
}

/** Follows an event stream, calling ``onEvent`` with each event's name and JSON data, and
 * reconnecting after a pause when it ends while the caller still follows. Returns the
 * function that stops following. */
export function follow(
  path: string,
  onEvent: (name: string, data: any) => void,
  options: { reconnect?: (lastEvent: string | null) => boolean } = {},
): () => void {
  const controller = new AbortController();
  let stopped = false;
  let last: string | null = null;
  const run = async (): Promise<void> => {
    while (!stopped) {
      try {
        const answer = await fetch(path, { headers: headers(), signal: controller.signal });
        if (answer.status === 401) {
          askToken();
          return;
        }
        if (answer.status === 404) {
          // an unknown run: said once as an event named "missing", not asked again
          const body = await answer.json().catch(() => ({}));
          onEvent("missing", body);
          return;
        }
        if (!answer.ok || !answer.body) throw new Error(`HTTP ${answer.status}`);
        const reader = answer.body.getReader();
        const decoder = new TextDecoder();
        const parser = new SseParser();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          for (const e of parser.push(decoder.decode(value, { stream: true }))) {
            last = e.event;
            onEvent(e.event, JSON.parse(e.data));
          }
        }
      } catch (error) {
        if (stopped) return;
      }
      if (options.reconnect && !options.reconnect(last)) return;
      await new Promise((r) => setTimeout(r, 1000));
    }
  };
  void run();
  return () => {
    stopped = true;
    controller.abort();
  };
}

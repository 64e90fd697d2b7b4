import React, { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import "@xyflow/react/dist/style.css";
import "./style.css";
import { onTokenNeeded, setToken, tokenGiven, tokenNeeded } from "./api";
import { RunsPage } from "./pages/Runs";
import { RunPage } from "./pages/Run";
import { EditorPage } from "./pages/Editor";
import { ResourcePage } from "./pages/Resource";
import { WorkersPage } from "./pages/Workers";

/** The page's route: the URL's fragment (#/runs/ID), so the service serves one document. */
function useRoute(): string[] {
  const read = () => window.location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const changed = () => setRoute(read());
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return route;
}

function TokenPrompt(): JSX.Element | null {
  const [shown, setShown] = useState(tokenNeeded());
  const [value, setValue] = useState("");
  useEffect(() => onTokenNeeded(() => setShown(tokenNeeded())), []);
  if (!shown) return null;
  return (
    <div className="modal" role="dialog" aria-label="token">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          tokenGiven();
          setToken(value.trim());
          setShown(false);
          window.location.reload();
        }}
      >
        <h2>This service needs its token</h2>
        <p>It is kept for this browser session only (sessionStorage), never in a URL.</p>
        <input
          type="password"
          aria-label="token"
          autoFocus
          value={value}
          onChange={(e) => setValue(e.target.value)}
        />
        <button type="submit">Use token</button>
      </form>
    </div>
  );
}

function App(): JSX.Element {
  const route = useRoute();
  const [head, ...rest] = route;
  let page: JSX.Element;
  if (head === "runs" && rest[0]) page = <RunPage runId={rest[0]} />;
  else if (head === "editor") page = <EditorPage key={rest[0] ?? ""} fromRun={rest[0] || undefined} />;
  else if (head === "resources" && rest.length) page = <ResourcePage resourceKey={rest.join("/")} />;
  else if (head === "workers") page = <WorkersPage />;
  else page = <RunsPage />;
  const active = (name: string) => (head === name || (name === "runs" && !head) ? "active" : "");
  return (
    <>
      <header className="top">
        <a className="brand" href="#/runs">
          simrun
        </a>
        <nav>
          <a className={active("runs")} href="#/runs">
            Runs
          </a>
          <a className={active("editor")} href="#/editor">
            Editor
          </a>
          <a className={active("workers")} href="#/workers">
            Workers
          </a>
        </nav>
      </header>
      <main>{page}</main>
      <TokenPrompt />
    </>
  );
}

createRoot(document.getElementById("root") as HTMLElement).render(
  <React.StrictMode>
    <App />
  </React.StrictMode>,
);

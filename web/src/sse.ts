// A parser of server-sent events (text/event-stream). The page reads the streams with
// fetch() rather than EventSource, because EventSource cannot send the Authorization
// header, and the token must never go into a URL (URLs get logged).

export interface SseEvent {
  event: string;
  data: string;
}

/** Feeds chunks of a stream; returns the complete events each chunk finished. */
export class SseParser {
  private buffer = "";

  push(chunk: string): SseEvent[] {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const out: SseEvent[] = [];
    let end = this.buffer.indexOf("\n\n");
    while (end >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      let name = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line === "" || line.startsWith(":")) continue; // a comment: keep-alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") name = value;
        else if (field === "data") data.push(value);
      }
      if (data.length) out.push({ event: name, data: data.join("\n") });
      end = this.buffer.indexOf("\n\n");
    }
    return out;
  }
}

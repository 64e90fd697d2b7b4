import { describe, expect, it } from "vitest";
import { SseParser } from "./sse";
import { groupFailures, layered } from "./graphLayout";
import { histogram, niceTop, timeAxis } from "./plot";
import { clockSkew, duration, gb } from "./format";

describe("SseParser", () => {
  it("gives events whole, across chunks, without keep-alive comments", () => {
    const p = new SseParser();
    expect(p.push('event: run\ndata: {"a"')).toEqual([]);
    expect(p.push(":1}\n\n: keep-alive\n\nevent: run\r\ndata: 2\r\n\r\n")).toEqual([
      { event: "run", data: '{"a":1}' },
      { event: "run", data: "2" },
    ]);
  });
});

describe("layered", () => {
  it("puts each task right of what it depends on", () => {
    const at = layered([
      { name: "b", depends: ["a"] },
      { name: "a", depends: [] },
      { name: "c", depends: ["a", "b"] },
    ]);
    expect(at.a.x).toBeLessThan(at.b.x);
    expect(at.b.x).toBeLessThan(at.c.x);
  });
});

describe("groupFailures", () => {
  it("groups by the error's last line, numbers aside, the largest group first", () => {
    const groups = groupFailures([
      { error: "Traceback\nValueError: unit 3 at 0.5" },
      { error: "Traceback\nKeyError: x" },
      { error: "Other\nValueError: unit 7 at 1.25" },
      { error: null },
    ]);
    expect(groups.map((g) => [g.error, g.units.length])).toEqual([
      ["ValueError: unit # at #", 2],
      ["KeyError: x", 1],
      ["(no message)", 1],
    ]);
  });
});

describe("plot numbers", () => {
  it.each([
    [0.7, 1],
    [1.3, 2],
    [2.2, 2.5],
    [7, 10],
    [0, 1],
  ])("niceTop(%d) = %d", (v, top) => expect(niceTop(v)).toBe(top));

  it("bins the peaks, the top in the last bin", () => {
    const bins = histogram([0, 0.5, 1, 1], 1, 2);
    expect(bins.map((b) => b.count)).toEqual([1, 3]);
  });
});

describe("format", () => {
  it.each([
    [null, "—"],
    [0.3, "<1 s"],
    [42, "42 s"],
    [125, "2 min 5 s"],
    [7200, "2 h 0 min"],
  ])("duration(%j) = %j", (s, text) => expect(duration(s)).toBe(text));
  it("gb", () => {
    expect(gb(0.5)).toBe("512 MiB");
    expect(gb(2)).toBe("2.00 GiB");
  });
});

describe("timeAxis", () => {
  it("places points by their time from the first to the last", () => {
    const at = timeAxis([100, 150, 200], [300], 4);
    expect(at(0, 100)).toBeCloseTo(0.02);
    expect(at(3, 300)).toBeCloseTo(0.98);
    expect(at(1, 150)).toBeCloseTo(0.02 + 0.96 * 0.25);
  });
  it("spreads points by order when they share one time or none is known", () => {
    for (const at of [timeAxis([5, 5], [], 2), timeAxis([], [], 2)]) {
      expect(at(0)).toBeCloseTo(0.25);
      expect(at(1)).toBeCloseTo(0.75);
    }
  });
});

describe("clockSkew", () => {
  it("signs the skew and says when it is not measured", () => {
    expect(clockSkew(-45)).toBe("clock −45.0 s vs Redis");
    expect(clockSkew(0.04)).toBe("clock +0.0 s vs Redis");
    expect(clockSkew(null)).toBe("clock not measured yet");
    expect(clockSkew(undefined)).toBe("clock not measured yet");
  });
});

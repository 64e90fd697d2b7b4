/// <reference types="vitest" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The bundle goes into the Python package, which ships it (no Node.js at install time).
// Names carry a hash of their content and nothing else varies between builds, so CI can
// rebuild and compare with the committed bundle.
// `npm run dev` serves the sources and sends the API's paths to a running service
// (SIMRUN_URL, by default `simrun service`'s address).
const service = process.env.SIMRUN_URL ?? "http://127.0.0.1:8765";

export default defineConfig({
  plugins: [react()],
  base: "/",
  server: {
    proxy: { "^/(runs|dashboard|workers|resources|types|health|backlog)": service },
  },
  build: {
    outDir: "../simrun/service/static",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 2000,
    rollupOptions: {
      output: {
        entryFileNames: "assets/[name]-[hash].js",
        chunkFileNames: "assets/[name]-[hash].js",
        assetFileNames: "assets/[name]-[hash][extname]",
      },
    },
  },
  test: {
    environment: "node",
    include: ["src/**/*.test.ts"],
  },
});

import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

// Static build of the dashboard into ./dist (relative asset URLs, no CDN, no external fonts).
export default defineConfig({
  root,
  base: './',
  publicDir: false,
  logLevel: 'warn',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    assetsInlineLimit: 0,
    sourcemap: true,
  },
  server: {
    // `vite dev` proxies the API to a running fixture server or `minicloud serve`.
    proxy: { '/api': process.env.MINICLOUD_URL ?? 'http://127.0.0.1:8787' },
  },
});

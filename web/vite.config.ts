import { resolve } from 'node:path';

import { defineConfig } from 'vite';

// The dashboard is a static site: the status service serves web/dist at /dashboard/. A second page,
// react.html, is built from the React hooks alone (the e2e suite drives it in Chromium).
export default defineConfig({
  root: 'dashboard',
  base: './',
  build: {
    outDir: '../dist',
    emptyOutDir: true,
    sourcemap: true,
    target: 'es2022',
    rollupOptions: {
      input: {
        main: resolve(import.meta.dirname, 'dashboard/index.html'),
        react: resolve(import.meta.dirname, 'dashboard/react.html'),
      },
    },
  },
  test: {
    root: '.',
    include: ['test/**/*.test.ts'],
  },
} as never);

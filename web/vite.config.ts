import { defineConfig } from 'vite';

// The dashboard is a static site: the status service serves web/dist at /dashboard/.
export default defineConfig({
  root: 'dashboard',
  base: './',
  build: {
    outDir: '../dist',
    emptyOutDir: true,
    sourcemap: true,
    target: 'es2022',
  },
  test: {
    root: '.',
    include: ['test/**/*.test.ts'],
  },
} as never);

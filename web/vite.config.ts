import { defineConfig } from 'vite';

// The server serves the build from its UI directory (ServerConfig::ui_dir): index.html at
// `/`, hashed files under `/assets/`. JSX is compiled by esbuild (no React plugin: no fast
// refresh is needed for a production build). TRAINYARD_UI_OUT lets scripts/build choose the
// output directory (the build tree, beside the binary). `npm run dev` serves the sources and
// passes API calls to the server at TRAINYARD_URL (default http://127.0.0.1:5000).
export default defineConfig({
  base: '/',
  server: {
    proxy: Object.fromEntries(
      ['/api', '/ajax-api'].map((p) => [p, process.env.TRAINYARD_URL || 'http://127.0.0.1:5000']),
    ),
  },
  esbuild: { jsx: 'automatic' },
  build: {
    outDir: process.env.TRAINYARD_UI_OUT || 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // No inlined data: URLs for scripts; the CSP allows only files from this origin.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: 'es2020',
  },
});

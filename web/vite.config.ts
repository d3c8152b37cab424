import { defineConfig, type Plugin } from 'vite';

// The app's code (React and App, boot.tsx) is a dynamic import of the small entry module, so
// that the entry can start the page's requests before React is even parsed (src/main.tsx).
// Left at that, the browser would ask for it only once the entry had loaded and run; a
// modulepreload link in index.html has it fetched (and parsed) alongside the entry.
function preloadBoot(): Plugin {
  return {
    name: 'trainyard-preload-boot',
    apply: 'build',
    transformIndexHtml: {
      order: 'post',
      handler(_html, ctx) {
        const chunks = Object.values(ctx.bundle ?? {}).filter((c) => c.type === 'chunk');
        const boot = chunks.find((c) => c.facadeModuleId?.endsWith('/src/boot.tsx'));
        if (!boot) return [];
        const files = new Set<string>();
        const add = (file: string) => {
          if (files.has(file) || chunks.some((c) => c.isEntry && c.fileName === file)) return;
          files.add(file);
          const chunk = chunks.find((c) => c.fileName === file);
          chunk?.imports.forEach(add);
        };
        add(boot.fileName);
        return [...files].map((file) => ({
          tag: 'link',
          attrs: { rel: 'modulepreload', crossorigin: true, href: `/${file}` },
          injectTo: 'head' as const,
        }));
      },
    },
  };
}

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
  plugins: [preloadBoot()],
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

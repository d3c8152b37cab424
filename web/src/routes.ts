// Hash routes, so that the links the mlflow client prints (`/#/experiments/<id>/runs/<id>`,
// `/#/models/<name>/versions/<v>`) open the matching page and the server serves one file.
// No React here: the entry module (main.tsx) reads the route before React has loaded.
export type Route =
  | { page: 'experiments' }
  | { page: 'runs'; experimentId: string }
  | { page: 'run'; experimentId: string; runId: string }
  | { page: 'compare'; experimentId: string; runIds: string[] }
  | { page: 'jobs' }
  | { page: 'job'; jobId: string }
  | { page: 'models' }
  | { page: 'model'; name: string }
  | { page: 'model-version'; name: string; version: string }
  | { page: 'catalogs' }
  | { page: 'catalog'; catalog: string }
  | { page: 'schema'; catalog: string; schema: string }
  | { page: 'table'; catalog: string; schema: string; table: string }
  | { page: 'lineage'; object: string }
  | { page: 'endpoints' }
  | { page: 'endpoint'; name: string }
  | { page: 'not-found'; path: string };

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#/, '') || '/';
  const [path, query = ''] = raw.split('?', 2);
  const params = new URLSearchParams(query);
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const [a, b, c, d] = parts;
  if (parts.length === 0) return { page: 'experiments' };
  if (a === 'experiments') {
    if (parts.length === 1) return { page: 'experiments' };
    if (parts.length === 2) return { page: 'runs', experimentId: b };
    if (parts.length === 4 && c === 'runs') return { page: 'run', experimentId: b, runId: d };
    if (parts.length === 3 && c === 'compare') {
      const runIds = [...new Set((params.get('runs') ?? '').split(',').filter(Boolean))];
      return { page: 'compare', experimentId: b, runIds };
    }
  }
  if (a === 'jobs') {
    if (parts.length === 1) return { page: 'jobs' };
    if (parts.length === 2) return { page: 'job', jobId: b };
  }
  if (a === 'models') {
    if (parts.length === 1) return { page: 'models' };
    if (parts.length === 2) return { page: 'model', name: b };
    if (parts.length === 4 && c === 'versions') return { page: 'model-version', name: b, version: d };
  }
  if (a === 'catalog') {
    if (parts.length === 1) return { page: 'catalogs' };
    if (parts.length === 2) return { page: 'catalog', catalog: b };
    if (parts.length === 3) return { page: 'schema', catalog: b, schema: c };
    if (parts.length === 4) return { page: 'table', catalog: b, schema: c, table: d };
  }
  if (a === 'lineage' && parts.length === 1) return { page: 'lineage', object: params.get('object') ?? '' };
  if (a === 'endpoints') {
    if (parts.length === 1) return { page: 'endpoints' };
    if (parts.length === 2) return { page: 'endpoint', name: b };
  }
  return { page: 'not-found', path };
}

export const href = {
  experiments: () => '#/experiments',
  runs: (experimentId: string) => `#/experiments/${encodeURIComponent(experimentId)}`,
  run: (experimentId: string, runId: string) =>
    `#/experiments/${encodeURIComponent(experimentId)}/runs/${encodeURIComponent(runId)}`,
  compare: (experimentId: string, runIds: string[]) =>
    `#/experiments/${encodeURIComponent(experimentId)}/compare?runs=${runIds
      .map(encodeURIComponent)
      .join(',')}`,
  jobs: () => '#/jobs',
  job: (jobId: string) => `#/jobs/${encodeURIComponent(jobId)}`,
  models: () => '#/models',
  model: (name: string) => `#/models/${encodeURIComponent(name)}`,
  modelVersion: (name: string, version: string) =>
    `#/models/${encodeURIComponent(name)}/versions/${encodeURIComponent(version)}`,
  catalogs: () => '#/catalog',
  catalog: (catalog: string) => `#/catalog/${encodeURIComponent(catalog)}`,
  schema: (catalog: string, schema: string) => `#/catalog/${encodeURIComponent(catalog)}/${encodeURIComponent(schema)}`,
  // A table by its three-level name (catalog.schema.table).
  table: (fullName: string) => `#/catalog/${fullName.split('.').map(encodeURIComponent).join('/')}`,
  // The lineage graph around TYPE:KEY[@VERSION], e.g. table:main.s.t@3, run:ID, job:ID.
  lineage: (object: string) => `#/lineage?object=${encodeURIComponent(object)}`,
  endpoints: () => '#/endpoints',
  endpoint: (name: string) => `#/endpoints/${encodeURIComponent(name)}`,
};


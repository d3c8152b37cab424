// The first requests of the page the app opens on, started by the entry module (main.tsx)
// before React and the pages' code have loaded, so that they travel while the rest of the
// bundle is fetched and parsed instead of one after another (bundle → whoami → page chunk →
// the page's request → the requests of its parts).
// A page takes a prefetched answer once (takePrefetched, or call() itself for the requests of
// pageReads) and asks the server itself when there is none, so a prefetch that was not needed
// (a refused token, another route) costs one request.
import {
  dropPrefetchedCalls,
  getExperiment,
  getToken,
  listRuns,
  MLFLOW,
  prefetchCall,
  TRAINYARD,
  whoami,
  type ListRunsQuery,
} from './api';
import { parseHash, type Route } from './routes';

const started = new Map<string, Promise<unknown>>();

function prefetch(key: string, start: () => Promise<unknown>): void {
  const p = start();
  p.catch(() => {}); // the page that takes it sees the error; none is left unhandled
  started.set(key, p);
}

// The prefetched answer for `key`, once; undefined when none was started (or it was taken).
export function takePrefetched<T>(key: string): Promise<T> | undefined {
  const p = started.get(key);
  started.delete(key);
  return p as Promise<T> | undefined;
}

export const whoamiKey = 'whoami';
export const experimentKey = (id: string) => `experiment:${id}`;
export const runsKey = (q: ListRunsQuery) =>
  `runs:${JSON.stringify([q.experimentId, q.filter, q.orderBy, q.columns ?? null, q.pageSize, q.cursor ?? null, !!q.withKeys])}`;

// The runs page's first query before the user sorts, filters or chooses columns (Runs.tsx
// asks for the same, so the prefetched answer matches).
export const FIRST_RUNS_PAGE = 100;
export function firstRunsQuery(experimentId: string): ListRunsQuery {
  return { experimentId, filter: '', orderBy: ['attributes.start_time DESC'], pageSize: FIRST_RUNS_PAGE };
}

// The experiment id when `hash` is a runs page (#/experiments/<id>), as router.ts reads it.
export function runsPageExperiment(hash: string): string | null {
  const m = /^#\/experiments\/([^/?]+)\/?(?:\?.*)?$/.exec(hash);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return null;
  }
}

const UC = '/api/2.1/unity-catalog';
const e = encodeURIComponent;

// The reads each page makes on opening, as its components make them (the same method, path,
// query and body, so that call() matches them): those of its parts that wait for another
// answer before they ask (a job's checkpoints, a table's preview and grants, an endpoint's
// request samples) included. A read that drifts from its page's is simply asked again.
function pageReads(route: Route): void {
  const json = (path: string, query?: Record<string, string | number>) => prefetchCall('json', 'GET', path, query);
  switch (route.page) {
    case 'experiments':
      prefetchCall('json', 'POST', `${MLFLOW}/experiments/search`, undefined, { max_results: 1000 });
      return;
    case 'run':
      json(`${MLFLOW}/runs/get`, { run_id: route.runId });
      json(`${MLFLOW}/artifacts/list`, { run_id: route.runId });
      return;
    case 'compare':
      for (const id of route.runIds) json(`${MLFLOW}/runs/get`, { run_id: id });
      return;
    case 'jobs':
      json(`${TRAINYARD}/jobs`, { max_results: 1000 });
      json(`${TRAINYARD}/cluster`);
      return;
    case 'job':
      json(`${TRAINYARD}/jobs/${e(route.jobId)}`);
      json(`${TRAINYARD}/jobs/${e(route.jobId)}/checkpoints`);
      return;
    case 'models':
      json(`${MLFLOW}/registered-models/search`, { max_results: 1000 });
      return;
    case 'model':
      json(`${MLFLOW}/registered-models/get`, { name: route.name });
      json(`${MLFLOW}/model-versions/search`, { filter: `name='${route.name.replace(/'/g, "\\'")}'`, max_results: 1000 });
      json(`${TRAINYARD}/registered-models/my-permissions`, { name: route.name });
      return;
    case 'model-version':
      json(`${MLFLOW}/model-versions/get`, { name: route.name, version: route.version });
      return;
    case 'catalogs':
      json(`${UC}/catalogs`, { max_results: 1000 });
      return;
    case 'catalog':
      json(`${UC}/schemas`, { catalog_name: route.catalog, max_results: 1000 });
      return;
    case 'schema': {
      const scope = { catalog_name: route.catalog, schema_name: route.schema, max_results: 1000 };
      json(`${UC}/tables`, scope);
      json(`${UC}/volumes`, scope);
      json(`${UC}/models`, scope);
      return;
    }
    case 'table': {
      const full = `${route.catalog}.${route.schema}.${route.table}`;
      json(`${UC}/tables/${e(full)}`);
      json(`${TRAINYARD}/tables/${e(full)}`);
      json(`${TRAINYARD}/tables/${e(full)}/history`, { limit: 50 });
      json(`${TRAINYARD}/tables/${e(full)}/my-permissions`);
      prefetchCall('text', 'GET', `${TRAINYARD}/tables/${e(full)}/rows`, { format: 'jsonl', max_rows: 20 });
      json(`${UC}/permissions/table/${e(full)}`);
      json(`${UC}/permissions/schema/${e(`${route.catalog}.${route.schema}`)}`);
      json(`${UC}/permissions/catalog/${e(route.catalog)}`);
      return;
    }
    case 'lineage':
      if (route.object) json(`${TRAINYARD}/lineage`, { object: route.object, direction: 'both', depth: 3, max_nodes: 200 });
      return;
    case 'endpoints':
      json(`${TRAINYARD}/endpoints`);
      return;
    case 'endpoint':
      json(`${TRAINYARD}/endpoints/${e(route.name)}`);
      json(`${TRAINYARD}/endpoints/${e(route.name)}/my-permissions`);
      json(`${TRAINYARD}/endpoints/${e(route.name)}/requests`, { limit: 20 });
      return;
    default:
      return;
  }
}

// Starts the requests of the page at `hash`; nothing without a token (the login page shows).
export function startPrefetch(hash: string): void {
  if (!getToken()) return;
  prefetch(whoamiKey, () => whoami());
  const experimentId = runsPageExperiment(hash);
  if (experimentId !== null) {
    const q = firstRunsQuery(experimentId);
    prefetch(runsKey(q), () => listRuns(q));
    prefetch(experimentKey(experimentId), () => getExperiment(experimentId));
    return;
  }
  pageReads(parseHash(hash));
  // Answers are for the page the app opened on: another page asks afresh.
  window.addEventListener('hashchange', dropPrefetchedCalls, { once: true });
}

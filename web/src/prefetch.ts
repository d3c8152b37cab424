// The first requests of the page the app opens on, started by the entry module (main.tsx)
// before React and the pages' code have loaded, so that they travel while the rest of the
// bundle is fetched and parsed instead of one after another (bundle → whoami → page chunk →
// the page's request → the requests of its parts).
// A page takes a prefetched answer once (takePrefetched, or call() itself for the requests of
// pageReads) and asks the server itself when there is none, so a prefetch that was not needed
// (a refused token, another route) costs one request.
import {
  chartBuckets,
  downsampleRuns,
  dropPrefetchedCalls,
  getExperiment,
  getToken,
  listRuns,
  MLFLOW,
  prefetchCall,
  TRAINYARD,
  whoami,
  type Downsampled,
  type ListRunsQuery,
  type Run,
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

// The first charts of a run or compare page: each one metric of the page's runs over their
// whole step range, asked for as soon as the runs' metric keys are known (from runs/get),
// while React and the page's code still load. A chart takes its answer once
// (takePrefetchedChart) when the buckets it wants are close to those asked for (its width is a
// guess here: the page's, before the page exists), else asks itself.
const charts = new Map<string, { buckets: number; answer: Promise<Downsampled[]> }>();
const chartKey = (runIds: string[], key: string) => JSON.stringify([runIds, key]);

export function takePrefetchedChart(runIds: string[], key: string, buckets: number): Promise<Downsampled[]> | undefined {
  const k = chartKey(runIds, key);
  const found = charts.get(k);
  charts.delete(k);
  if (!found || found.buckets < buckets * 0.75 || found.buckets > buckets * 1.34) return undefined;
  return found.answer;
}

// A chart's width on a run or compare page: main's padding (20 px a side) and the chart's
// border (1 px a side) off the window's width.
const expectedChartWidth = () => document.documentElement.clientWidth - 42;
// Charts start about this far down those pages, each 280-320 px tall, and one mounts 200 px
// before it scrolls into view (LazyMount). Measured in a 1400x900 window: the compare page's
// first chart at 144 px (4 charts mount), a run page's (5 params, 8 metrics, an artifact) at
// 684 px (2 mount). A guess too many costs a request; one too few, the chart asks itself.
const CHART_HEIGHT = 280;
const COMPARE_PAGE_CHARTS_TOP = 200;
const RUN_PAGE_CHARTS_TOP = 800;

// Once the runs are in: the charts of the first metric keys (in the page's order: `byKey`)
// that can be on screen from `top` px down.
function prefetchCharts(hash: string, runIds: string[], answers: Promise<unknown>[], top: number,
  byKey?: (a: string, b: string) => number): void {
  Promise.all(answers)
    .then((got) => {
      if (window.location.hash !== hash) return; // the user went on: that page asks itself
      const runs = got.map((a) => (a as { run: Run }).run);
      const keys = [...new Set(runs.flatMap((r) => (r.data.metrics ?? []).map((m) => m.key)))].sort(byKey);
      const count = Math.max(0, Math.ceil((window.innerHeight + 200 - top) / CHART_HEIGHT));
      const buckets = chartBuckets(expectedChartWidth());
      for (const key of keys.slice(0, count)) {
        const answer = downsampleRuns(runIds, key, buckets);
        answer.catch(() => {}); // the chart that takes it shows the error
        charts.set(chartKey(runIds, key), { buckets, answer });
      }
    })
    .catch(() => {}); // the page shows why its runs did not load
}

const UC = '/api/2.1/unity-catalog';
const e = encodeURIComponent;

// The reads each page makes on opening, as its components make them (the same method, path,
// query and body, so that call() matches them): those of its parts that wait for another
// answer before they ask (a job's checkpoints, a table's preview and grants, an endpoint's
// request samples) included. A read that drifts from its page's is simply asked again.
function pageReads(hash: string, route: Route): void {
  const json = (path: string, query?: Record<string, string | number>) => prefetchCall('json', 'GET', path, query);
  switch (route.page) {
    case 'experiments':
      prefetchCall('json', 'POST', `${MLFLOW}/experiments/search`, undefined, { max_results: 1000 });
      return;
    case 'run': {
      const run = json(`${MLFLOW}/runs/get`, { run_id: route.runId });
      json(`${MLFLOW}/artifacts/list`, { run_id: route.runId });
      prefetchCharts(hash, [route.runId], [run], RUN_PAGE_CHARTS_TOP, (a, b) => a.localeCompare(b)); // as RunDetail
      return;
    }
    case 'compare': {
      const runs = route.runIds.map((id) => json(`${MLFLOW}/runs/get`, { run_id: id }));
      prefetchCharts(hash, route.runIds, runs, COMPARE_PAGE_CHARTS_TOP); // Compare sorts as sort() does
      return;
    }
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
      // Then its source run (the page links to it, on its experiment's path).
      json(`${MLFLOW}/model-versions/get`, { name: route.name, version: route.version })
        .then((a) => {
          const runId = (a as { model_version?: { run_id?: string } }).model_version?.run_id;
          if (runId && window.location.hash === hash) json(`${MLFLOW}/runs/get`, { run_id: runId });
        })
        .catch(() => {}); // the page shows why the version did not load
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
  pageReads(hash, parseHash(hash));
  // Answers are for the page the app opened on: another page asks afresh.
  window.addEventListener('hashchange', () => {
    dropPrefetchedCalls();
    charts.clear();
  }, { once: true });
}

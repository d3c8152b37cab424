// The first requests of the page the app opens on, started by the entry module (main.tsx)
// before React and the pages' code have loaded, so that they travel while the rest of the
// bundle is fetched and parsed instead of one after another (bundle → whoami → page → rows).
// A page takes a prefetched answer once (takePrefetched) and asks the server itself when there
// is none, so a prefetch that was not needed (a refused token, another route) costs one request.
import { getExperiment, getToken, listRuns, whoami, type ListRunsQuery } from './api';

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

// Starts the requests of the page at `hash`; nothing without a token (the login page shows).
export function startPrefetch(hash: string): void {
  if (!getToken()) return;
  prefetch(whoamiKey, () => whoami());
  const experimentId = runsPageExperiment(hash);
  if (experimentId !== null) {
    const q = firstRunsQuery(experimentId);
    prefetch(runsKey(q), () => listRuns(q));
    prefetch(experimentKey(experimentId), () => getExperiment(experimentId));
  }
}

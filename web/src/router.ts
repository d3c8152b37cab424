// Hash routes, so that the links the mlflow client prints (`/#/experiments/<id>/runs/<id>`,
// `/#/models/<name>/versions/<v>`) open the matching page and the server serves one file.
import { useEffect, useState } from 'react';

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
      const runIds = (params.get('runs') ?? '').split(',').filter(Boolean);
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
};

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(window.location.hash));
  useEffect(() => {
    const update = () => setRoute(parseHash(window.location.hash));
    window.addEventListener('hashchange', update);
    return () => window.removeEventListener('hashchange', update);
  }, []);
  return route;
}

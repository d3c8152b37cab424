// Every call to the server goes through here: it carries the signed-in user's token
// (kept in sessionStorage: gone when the tab closes) and turns errors into ApiError with the
// server's message, so pages can show what went wrong and what to do.

const TOKEN_KEY = 'trainyard.token';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

type UnauthorizedListener = (message: string) => void;
let unauthorized: UnauthorizedListener = () => {};

// The app signs the user out (and says why) when the server refuses the token.
export function onUnauthorized(listener: UnauthorizedListener): void {
  unauthorized = listener;
}

type Query = Record<string, string | number | boolean | string[] | undefined>;

function queryString(query?: Query): string {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) v.forEach((x) => params.append(k, x));
    else params.append(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : '';
}

export async function call<T>(
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  path: string,
  options: { query?: Query; body?: unknown; token?: string } = {},
): Promise<T> {
  const token = options.token ?? getToken();
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(path + queryString(options.query), {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: 'omit',
    });
  } catch (e) {
    throw new ApiError(0, `cannot reach the Trainyard server (${String(e)}); is it running?`);
  }
  const text = await response.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : {};
  } catch {
    parsed = undefined;
  }
  if (!response.ok) {
    const obj = (parsed ?? {}) as { message?: string; error_code?: string };
    const message = obj.message || text || response.statusText;
    if (response.status === 401 && options.token === undefined) unauthorized(message);
    throw new ApiError(response.status, message, obj.error_code);
  }
  if (parsed === undefined) throw new ApiError(response.status, 'the server sent no JSON');
  return parsed as T;
}

// A call whose answer is plain text (job logs), with the response's headers.
export async function callText(
  path: string,
  query: Query,
): Promise<{ text: string; headers: Headers }> {
  const token = getToken();
  const response = await fetch(path + queryString(query), {
    headers: token ? { Authorization: `Bearer ${token}` } : {},
    credentials: 'omit',
  });
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try {
      message = (JSON.parse(text) as { message?: string }).message ?? text;
    } catch {
      /* not JSON: the text is the message */
    }
    if (response.status === 401) unauthorized(message);
    throw new ApiError(response.status, message);
  }
  return { text, headers: response.headers };
}

// ------------------------------------------------------------------ the shapes the UI reads

export interface KeyValue {
  key: string;
  value: string;
}

export interface Metric {
  key: string;
  value: number | string;
  timestamp: number;
  step: number;
}

export interface Run {
  info: {
    run_id: string;
    run_name?: string;
    experiment_id: string;
    status: string;
    start_time?: number;
    end_time?: number;
    user_id?: string;
    artifact_uri?: string;
    lifecycle_stage?: string;
  };
  data: { metrics?: Metric[]; params?: KeyValue[]; tags?: KeyValue[] };
}

export interface Experiment {
  experiment_id: string;
  name: string;
  lifecycle_stage: string;
  creation_time?: number;
  last_update_time?: number;
  tags?: KeyValue[];
}

export interface Whoami {
  user: string;
  is_admin: boolean;
}

export interface Downsampled {
  run_id: string;
  key: string;
  exact: boolean;
  total_points: number;
  steps: number[];
  timestamps: number[];
  values: (number | string)[];
}

export const MLFLOW = '/api/2.0/mlflow';
export const TRAINYARD = '/api/trainyard/v1';

export function whoami(token?: string): Promise<Whoami> {
  return call<Whoami>('GET', `${TRAINYARD}/whoami`, { token });
}

export async function searchExperiments(): Promise<Experiment[]> {
  const out: Experiment[] = [];
  let page_token: string | undefined;
  do {
    const r = await call<{ experiments?: Experiment[]; next_page_token?: string }>(
      'POST',
      `${MLFLOW}/experiments/search`,
      { body: { max_results: 1000, page_token } },
    );
    out.push(...(r.experiments ?? []));
    page_token = r.next_page_token || undefined;
  } while (page_token);
  return out;
}

export function getExperiment(id: string): Promise<{ experiment: Experiment }> {
  return call('GET', `${MLFLOW}/experiments/get`, { query: { experiment_id: id } });
}

// All runs of an experiment matching `filter` (MLflow's grammar), page by page; `progress`
// sees the runs so far after each page (so a table can show them while the rest load), and
// an aborted `signal` stops the paging.
export async function searchRuns(
  experimentId: string,
  filter: string,
  progress?: (soFar: Run[]) => void,
  signal?: AbortSignal,
  limit = 100000,
): Promise<Run[]> {
  const out: Run[] = [];
  let page_token: string | undefined;
  do {
    const r = await call<{ runs?: Run[]; next_page_token?: string }>(
      'POST',
      `${MLFLOW}/runs/search`,
      {
        body: {
          experiment_ids: [experimentId],
          filter: filter || undefined,
          max_results: 1000,
          order_by: ['attributes.start_time DESC'],
          page_token,
        },
      },
    );
    if (signal?.aborted) return out;
    out.push(...(r.runs ?? []));
    page_token = r.next_page_token || undefined;
    if (page_token) progress?.(out.slice());
  } while (page_token && out.length < limit);
  return out;
}

export async function getRun(runId: string): Promise<Run> {
  const r = await call<{ run: Run }>('GET', `${MLFLOW}/runs/get`, { query: { run_id: runId } });
  return r.run;
}

export function downsample(
  runId: string,
  key: string,
  buckets: number,
  minStep?: number,
  maxStep?: number,
): Promise<Downsampled> {
  return call<Downsampled>('GET', `${TRAINYARD}/metrics/downsample`, {
    query: { run_id: runId, key, buckets, min_step: minStep, max_step: maxStep },
  });
}

export function metricNumber(v: number | string): number | null {
  if (typeof v === 'number') return v;
  return null; // "NaN", "Infinity", "-Infinity": gaps in a chart
}

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

// Reads started by the entry module (prefetch.ts) before the page that needs them has loaded,
// by request (method, URL, body). The page's own call() for the same request takes the answer
// once instead of asking again; a prefetch no page took costs one request. Only reads are
// prefetched; a navigation drops what was not taken (dropPrefetchedCalls), so an answer is
// never older than the page that opened with it.
const early = new Map<string, Promise<unknown>>();

function requestKey(method: string, url: string, body: unknown): string {
  return `${method} ${url} ${body === undefined ? '' : JSON.stringify(body)}`;
}

// Returns the answer's promise too, for a prefetch that waits on it (a chart's keys).
export function prefetchCall(kind: 'json' | 'text', method: 'GET' | 'POST', path: string, query?: Query, body?: unknown): Promise<unknown> {
  const key = `${kind} ${requestKey(method, path + queryString(query), body)}`;
  const started = early.get(key);
  if (started) return started;
  const p = kind === 'json' ? call(method, path, { query, body }) : callText(path, query ?? {});
  p.catch(() => {}); // the page that takes it sees the error; none is left unhandled
  early.set(key, p);
  return p;
}

export function dropPrefetchedCalls(): void {
  early.clear();
}

function takeEarly<T>(key: string): Promise<T> | undefined {
  const p = early.get(key);
  if (p) early.delete(key);
  return p as Promise<T> | undefined;
}

export async function call<T>(
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  path: string,
  options: { query?: Query; body?: unknown; token?: string; signal?: AbortSignal } = {},
): Promise<T> {
  if ((method === 'GET' || method === 'POST') && options.token === undefined && early.size) {
    const taken = takeEarly<T>(`json ${requestKey(method, path + queryString(options.query), options.body)}`);
    if (taken) return taken;
  }
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
      signal: options.signal,
    });
  } catch (e) {
    if (options.signal?.aborted) throw e;
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
  if (early.size) {
    const taken = takeEarly<{ text: string; headers: Headers }>(`text ${requestKey('GET', path + queryString(query), undefined)}`);
    if (taken) return taken;
  }
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

export async function getRun(runId: string): Promise<Run> {
  const r = await call<{ run: Run }>('GET', `${MLFLOW}/runs/get`, { query: { run_id: runId } });
  return r.run;
}

// The most runs one downsample-bulk request may name (the server's kMaxDownsampleRuns).
export const MAX_DOWNSAMPLE_RUNS = 100;

// How many buckets a chart `width` pixels wide asks for: one per 2 px (each keeps its min and
// max, so about a point per pixel column), the width rounded to 100 px so that only a real
// resize asks again. The entry module (prefetch.ts) asks with the same for the width it expects.
export function chartBuckets(width: number): number {
  const rounded = Math.max(100, Math.round(width / 100) * 100);
  return Math.min(10000, Math.max(50, Math.ceil(rounded / 2)));
}

// One metric of several runs, downsampled (min/max per bucket of the step range; exact once
// the range holds few enough points), in the order of `runIds`: one request per
// MAX_DOWNSAMPLE_RUNS runs.
export async function downsampleRuns(
  runIds: string[],
  key: string,
  buckets: number,
  minStep?: number,
  maxStep?: number,
): Promise<Downsampled[]> {
  const parts: Promise<{ series: Downsampled[] }>[] = [];
  for (let i = 0; i < runIds.length; i += MAX_DOWNSAMPLE_RUNS) {
    parts.push(
      call('GET', `${TRAINYARD}/metrics/downsample-bulk`, {
        query: { run_ids: runIds.slice(i, i + MAX_DOWNSAMPLE_RUNS), key, buckets, min_step: minStep, max_step: maxStep },
      }),
    );
  }
  return (await Promise.all(parts)).flatMap((p) => p.series);
}

export function metricNumber(v: number | string): number | null {
  if (typeof v === 'number') return v;
  return null; // "NaN", "Infinity", "-Infinity": gaps in a chart
}

// ------------------------------------------------------------------ the runs listing

// One page of /runs/list: a run's info and one cell per column (null: the run has none).
export interface RunRow {
  run_id: string;
  run_name: string;
  status: string;
  user_id: string;
  start_time?: number;
  end_time?: number;
  cells: (number | string | null)[];
}

export interface RunListPage {
  columns: string[]; // "metrics.acc", "params.lr", "tags.`a b`"
  runs: RunRow[];
  next_cursor?: string;
  total?: number; // the first page only
  // With withKeys: every key of the experiment's runs (costs a read of them all).
  metric_keys?: string[];
  param_keys?: string[];
  keys_truncated?: boolean;
}

export interface ListRunsQuery {
  experimentId: string;
  filter: string;
  orderBy: string[];
  columns?: string[];
  pageSize: number;
  cursor?: string;
  withKeys?: boolean;
}

// The runs of an experiment matching `filter` (MLflow's grammar), sorted by the server in
// MLflow's order_by semantics, with only the given columns; keyset pages (`cursor`).
export function listRuns(q: ListRunsQuery, signal?: AbortSignal): Promise<RunListPage> {
  return call<RunListPage>('GET', `${TRAINYARD}/runs/list`, {
    query: {
      experiment_id: q.experimentId,
      filter: q.filter || undefined,
      order_by: q.orderBy,
      columns: q.columns,
      page_size: q.pageSize,
      cursor: q.cursor,
      with_keys: q.withKeys || undefined,
    },
    signal,
  });
}

// ------------------------------------------------------------------ server-sent events

export interface SseEvent {
  event: string; // "message" when the server names none
  data: string;
  id?: string;
}

// Reads a text/event-stream response with fetch (EventSource cannot send the Authorization
// header), handing each event to `onEvent` as it arrives; resolves when the server ends the
// stream. `lastEventId` resumes where a previous connection stopped.
export async function streamEvents(
  path: string,
  query: Query,
  onEvent: (e: SseEvent) => void,
  signal: AbortSignal,
  lastEventId?: string,
): Promise<void> {
  const token = getToken();
  const headers: Record<string, string> = { Accept: 'text/event-stream' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (lastEventId) headers['Last-Event-ID'] = lastEventId;
  const response = await fetch(path + queryString(query), { headers, credentials: 'omit', signal });
  if (!response.ok || !response.body) {
    const text = await response.text();
    let message = text || response.statusText;
    try {
      message = (JSON.parse(text) as { message?: string }).message ?? message;
    } catch {
      /* not JSON: the text is the message */
    }
    if (response.status === 401) unauthorized(message);
    throw new ApiError(response.status, message);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // Events end with a blank line; fields are "name: value" lines; ":" starts a comment.
    let blank: RegExpExecArray | null;
    while ((blank = /\r?\n\r?\n/.exec(buffer)) !== null) {
      const block = buffer.slice(0, blank.index);
      buffer = buffer.slice(blank.index + blank[0].length);
      const e: SseEvent = { event: 'message', data: '' };
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        const v = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (name === 'event') e.event = v;
        else if (name === 'data') data.push(v);
        else if (name === 'id') e.id = v;
      }
      if (data.length === 0 && e.event === 'message') continue;
      e.data = data.join('\n');
      onEvent(e);
    }
  }
}

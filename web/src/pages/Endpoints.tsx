// Serving endpoints: the list (state, served entities, traffic split, replicas ready/desired,
// scale to zero) and an endpoint's page: its split, its replicas, capture counts, and the
// last captured requests with latency figures over them (owner, admins and MANAGE holders:
// the bodies are other callers' requests).
import { useState } from 'react';
import { call, TRAINYARD } from '../api';
import { ActionButton, DeniedReason, useDecisions } from '../components/Permissions';
import { KeyValueTable, Show } from '../components/Status';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

interface ServedEntity {
  name: string;
  model: string;
  version?: number;
  alias?: string;
  flavor?: string;
}

interface Replica {
  id: string;
  served_entity: string;
  model_version: number;
  flavor: string;
  state: string;
  outstanding: number;
  served: number;
  started_at: number;
}

interface Endpoint {
  name: string;
  owner: string;
  state: string;
  served_entities: ServedEntity[];
  routes: { served_entity: string; percent: number }[];
  min_replicas: number;
  max_replicas: number;
  scale_to_zero_seconds: number;
  target_concurrency: number;
  created_at: number;
  updated_at: number;
  grants: { principal: string; privilege: string }[];
  entity_states: { name: string; target_replicas: number; restarts: number; last_error?: string }[];
  replicas: Replica[];
  capture: { captured: number; dropped: number };
  last_request_at?: number;
}

interface CapturedRequest {
  request_id: string;
  timestamp_ms: number;
  served_entity: string;
  model_version: number;
  status: number;
  latency_ms: number;
  path: string;
  user: string;
  request: unknown;
  response: unknown;
}

const COLORS = ['#1f5fbf', '#1a7f37', '#8a6d00', '#b3261e', '#6b3fa0', '#00838f'];

function entityText(e: ServedEntity): string {
  return `${e.name}: ${e.model} ${e.version !== undefined ? `v${e.version}` : `@${e.alias}`}`;
}

function replicasText(ep: Endpoint): string {
  const ready = ep.replicas.filter((r) => r.state === 'READY').length;
  const desired = ep.entity_states.reduce((n, e) => n + e.target_replicas, 0);
  return `${ready}/${desired}`;
}

function scaleToZeroText(ep: Endpoint): string {
  return ep.scale_to_zero_seconds > 0 ? `after ${ep.scale_to_zero_seconds} s idle` : 'never';
}

function splitText(ep: Endpoint): string {
  return ep.routes.map((r) => `${r.served_entity} ${r.percent}%`).join(', ');
}

function SplitBar({ ep }: { ep: Endpoint }) {
  return (
    <div className="split" data-testid="traffic-split" aria-label={`traffic split ${splitText(ep)}`}>
      {ep.routes.map((r, i) => (
        <span
          key={r.served_entity}
          style={{ width: `${r.percent}%`, background: COLORS[i % COLORS.length] }}
          title={`${r.served_entity}: ${r.percent}%`}
        >
          {r.served_entity} {r.percent}%
        </span>
      ))}
    </div>
  );
}

export function Endpoints() {
  const list = useLoad(() => call<{ endpoints?: Endpoint[] }>('GET', `${TRAINYARD}/endpoints`), []);
  return (
    <section>
      <h2>Serving endpoints</h2>
      <Show loaded={list}>
        {({ endpoints }) =>
          !endpoints?.length ? (
            <p className="muted">No endpoints you may query: create one with 'trainyard endpoints create'.</p>
          ) : (
            <table className="grid" data-testid="endpoints-table">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>State</th>
                  <th>Served entities</th>
                  <th>Traffic split</th>
                  <th>Replicas ready/desired</th>
                  <th>Scale to zero</th>
                  <th>Owner</th>
                </tr>
              </thead>
              <tbody>
                {endpoints.map((ep) => (
                  <tr key={ep.name}>
                    <td>
                      <a href={href.endpoint(ep.name)}>{ep.name}</a>
                    </td>
                    <td>{ep.state}</td>
                    <td>{ep.served_entities.map(entityText).join('; ')}</td>
                    <td>{splitText(ep)}</td>
                    <td>{replicasText(ep)}</td>
                    <td>{scaleToZeroText(ep)}</td>
                    <td>{ep.owner}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
    </section>
  );
}

function preview(v: unknown): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s && s.length > 600 ? `${s.slice(0, 600)}…` : s ?? '';
}

function RecentRequests({ name, denied }: { name: string; denied: string | null }) {
  const samples = useLoad(
    () =>
      denied !== null
        ? Promise.resolve(null)
        : call<{ requests: CapturedRequest[]; latency: { count: number; p50_ms: number; p95_ms: number; max_ms: number }; errors: number }>(
            'GET',
            `${TRAINYARD}/endpoints/${encodeURIComponent(name)}/requests`,
            { query: { limit: 20 } },
          ),
    [name, denied],
  );
  if (denied !== null) return <DeniedReason reason={`the captured requests are shown to managers only: ${denied}`} />;
  return (
    <Show loaded={samples}>
      {(s) =>
        !s || s.requests.length === 0 ? (
          <p className="muted" data-testid="no-requests">No captured requests yet.</p>
        ) : (
          <>
            <p data-testid="latency">
              Over the last {s.latency.count} requests: p50 {s.latency.p50_ms} ms, p95 {s.latency.p95_ms} ms, max{' '}
              {s.latency.max_ms} ms; {s.errors} errors.
            </p>
            <table className="grid" data-testid="request-samples">
              <thead>
                <tr>
                  <th>Time</th>
                  <th>Entity</th>
                  <th>Status</th>
                  <th>Latency</th>
                  <th>User</th>
                  <th>Request</th>
                  <th>Response</th>
                </tr>
              </thead>
              <tbody>
                {s.requests.map((r) => (
                  <tr key={r.request_id}>
                    <td>{formatTime(r.timestamp_ms)}</td>
                    <td>
                      {r.served_entity} (v{r.model_version})
                    </td>
                    <td>{r.status}</td>
                    <td>{r.latency_ms} ms</td>
                    <td>{r.user}</td>
                    <td>
                      <pre className="sample">{preview(r.request)}</pre>
                    </td>
                    <td>
                      <pre className="sample">{preview(r.response)}</pre>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </>
        )
      }
    </Show>
  );
}

function DeleteEndpoint({ name, decisions }: { name: string; decisions: ReturnType<typeof useDecisions> }) {
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const remove = async () => {
    try {
      await call('DELETE', `${TRAINYARD}/endpoints/${encodeURIComponent(name)}`);
      window.location.hash = href.endpoints();
    } catch (e) {
      setError(errorMessage(e));
      setConfirming(false);
    }
  };
  return (
    <div className="actions">
      {confirming ? (
        <>
          <span>Delete endpoint {name}? Its replicas stop and its URL answers 404.</span>
          <button type="button" onClick={remove}>
            Yes, delete it
          </button>
          <button type="button" onClick={() => setConfirming(false)}>
            No
          </button>
        </>
      ) : (
        <ActionButton decisions={decisions} action="manage" onClick={() => setConfirming(true)}>
          Delete endpoint
        </ActionButton>
      )}
      {error ? <p className="error" role="alert">{error}</p> : null}
    </div>
  );
}

export function EndpointPage({ name }: { name: string }) {
  const ep = useLoad(() => call<Endpoint>('GET', `${TRAINYARD}/endpoints/${encodeURIComponent(name)}`), [name]);
  const decisions = useDecisions(`${TRAINYARD}/endpoints/${encodeURIComponent(name)}/my-permissions`, undefined, [name]);
  const manage = decisions?.manage;
  return (
    <section>
      <p className="crumbs">
        <a href={href.endpoints()}>Endpoints</a> /
      </p>
      <h2>{name}</h2>
      <Show loaded={ep}>
        {(e) => (
          <div data-testid="endpoint-detail">
            <KeyValueTable
              testId="endpoint-info"
              empty=""
              rows={[
                ['State', e.state],
                ['Owner', e.owner],
                ['Traffic split', <SplitBar ep={e} />],
                ['Replicas ready/desired', replicasText(e)],
                ['Replicas min-max', `${e.min_replicas}-${e.max_replicas} (target ${e.target_concurrency} in flight each)`],
                ['Scale to zero', scaleToZeroText(e)],
                ['Requests captured', `${e.capture.captured} (${e.capture.dropped} dropped) since the server started`],
                ['Last request', e.last_request_at ? formatTime(e.last_request_at) : 'none since the server started'],
                ['Grants', e.grants.map((g) => `${g.principal} ${g.privilege}`).join(', ') || 'none'],
                ['Lineage', <a href={href.lineage(`endpoint:${name}`)}>what it serves</a>],
              ]}
            />
            <DeleteEndpoint name={name} decisions={decisions} />
            <h3>Served entities</h3>
            <table className="grid" data-testid="served-entities">
              <thead>
                <tr>
                  <th>Entity</th>
                  <th>Model</th>
                  <th>Traffic</th>
                  <th>Target replicas</th>
                  <th>Restarts</th>
                  <th>Last error</th>
                </tr>
              </thead>
              <tbody>
                {e.served_entities.map((s) => {
                  const st = e.entity_states.find((x) => x.name === s.name);
                  const route = e.routes.find((r) => r.served_entity === s.name);
                  return (
                    <tr key={s.name}>
                      <td>{s.name}</td>
                      <td>
                        {s.version !== undefined ? (
                          <a href={href.modelVersion(s.model, String(s.version))}>
                            {s.model} v{s.version}
                          </a>
                        ) : (
                          <a href={href.model(s.model)}>
                            {s.model} @{s.alias}
                          </a>
                        )}
                      </td>
                      <td>{route ? `${route.percent}%` : '0%'}</td>
                      <td>{st?.target_replicas ?? 0}</td>
                      <td>{st?.restarts ?? 0}</td>
                      <td>{st?.last_error ?? ''}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
            <h3>Replicas</h3>
            {e.replicas.length === 0 ? (
              <p className="muted">No replicas (scaled to zero): the next request starts one.</p>
            ) : (
              <table className="grid" data-testid="replicas">
                <thead>
                  <tr>
                    <th>Replica</th>
                    <th>Entity</th>
                    <th>Version</th>
                    <th>State</th>
                    <th>In flight</th>
                    <th>Served</th>
                    <th>Started</th>
                  </tr>
                </thead>
                <tbody>
                  {e.replicas.map((r) => (
                    <tr key={r.id}>
                      <td>{r.id}</td>
                      <td>{r.served_entity}</td>
                      <td>{r.model_version}</td>
                      <td>{r.state}</td>
                      <td>{r.outstanding}</td>
                      <td>{r.served}</td>
                      <td>{formatTime(r.started_at)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
            <h3>Recent requests</h3>
            {decisions === null ? (
              <p className="muted">Loading…</p>
            ) : (
              <RecentRequests name={name} denied={manage && !manage.allowed ? manage.reason : null} />
            )}
          </div>
        )}
      </Show>
    </section>
  );
}

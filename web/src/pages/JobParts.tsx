// The parts of the jobs pages that read more than the job itself: the cluster's nodes, a
// job's checkpoints and its ranks' logs.
import { useEffect, useRef, useState } from 'react';
import { call, callText, streamEvents, TRAINYARD } from '../api';
import { Show } from '../components/Status';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

interface ClusterNode {
  name: string;
  gpus: number;
  cpus: number;
  gpus_used: number;
  cpus_used: number;
  jobs: string[];
}

export function Cluster() {
  const cluster = useLoad(
    () => call<{ pool: string; mode: string; nodes: ClusterNode[] }>('GET', `${TRAINYARD}/cluster`),
    [],
  );
  return (
    <Show loaded={cluster}>
      {(c) => (
        <>
          <h3>
            Cluster: pool {c.pool} ({c.mode})
          </h3>
          <table className="grid" data-testid="cluster-table">
            <thead>
              <tr>
                <th>Node</th>
                <th>GPUs used</th>
                <th>CPUs used</th>
                <th>Jobs</th>
              </tr>
            </thead>
            <tbody>
              {c.nodes.map((n) => (
                <tr key={n.name}>
                  <td>{n.name}</td>
                  <td>
                    {n.gpus_used} / {n.gpus}
                  </td>
                  <td>
                    {n.cpus_used} / {n.cpus}
                  </td>
                  <td>
                    {n.jobs.map((j) => (
                      <a key={j} href={href.job(j)}>
                        {j}{' '}
                      </a>
                    ))}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </Show>
  );
}

const MAX_LOG_CHARS = 1 << 20;

export interface AttemptRef {
  attempt: number;
  ranks: number;
}

// A rank's log of one attempt. Following, it is a stream of server-sent events
// (/logs/stream) that ends when the attempt is over, resumed from the last event's offset if
// the connection drops; otherwise the log is read once, from an offset on, chunk by chunk.
export function LogViewer({ jobId, attempts }: { jobId: string; attempts: AttemptRef[] }) {
  const last = attempts[attempts.length - 1];
  const [attempt, setAttempt] = useState(last?.attempt ?? 1);
  const [rank, setRank] = useState(0);
  const [follow, setFollow] = useState(true);
  const [log, setLog] = useState('');
  const [streaming, setStreaming] = useState<'live' | 'ended' | 'off'>('off');
  const [error, setError] = useState<string | null>(null);
  const pre = useRef<HTMLPreElement>(null);
  const ranks = attempts.find((a) => a.attempt === attempt)?.ranks ?? 1;
  useEffect(() => {
    const abort = new AbortController();
    const path = `${TRAINYARD}/jobs/${encodeURIComponent(jobId)}`;
    setLog('');
    setError(null);
    const append = (text: string) => setLog((l) => (l + text).slice(-MAX_LOG_CHARS));
    const readOnce = async () => {
      let offset = 0;
      for (;;) {
        const r = await callText(`${path}/logs`, { attempt, rank, offset });
        if (abort.signal.aborted) return;
        offset = Number(r.headers.get('X-Trainyard-Next-Offset') ?? offset);
        if (!r.text) return;
        append(r.text);
      }
    };
    const followStream = async () => {
      let lastId: string | undefined;
      let ended = false;
      setStreaming('live');
      // A dropped connection resumes from the last event's id (its byte offset).
      for (let tries = 0; !ended && tries < 5; tries++) {
        await streamEvents(
          `${path}/logs/stream`,
          { attempt, rank },
          (e) => {
            if (e.id) lastId = e.id;
            if (e.event === 'log') {
              tries = 0;
              append((JSON.parse(e.data) as { text: string }).text);
            } else if (e.event === 'end') {
              ended = true;
            } else if (e.event === 'error') {
              throw new Error((JSON.parse(e.data) as { message: string }).message);
            }
          },
          abort.signal,
          lastId,
        );
      }
      if (!abort.signal.aborted) setStreaming('ended');
    };
    (follow ? followStream() : readOnce()).catch((e: unknown) => {
      if (!abort.signal.aborted) {
        setError(errorMessage(e));
        setStreaming('off');
      }
    });
    return () => {
      abort.abort();
      setStreaming('off');
    };
  }, [jobId, attempt, rank, follow]);
  useEffect(() => {
    if (follow && pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [log, follow]);
  return (
    <div data-testid="job-logs">
      <div className="toolbar">
        <label>
          attempt{' '}
          <select value={attempt} onChange={(e) => setAttempt(Number(e.target.value))} aria-label="attempt">
            {attempts.map((a) => (
              <option key={a.attempt} value={a.attempt}>
                {a.attempt}
              </option>
            ))}
          </select>
        </label>
        <label>
          rank{' '}
          <select value={rank} onChange={(e) => setRank(Number(e.target.value))} aria-label="rank">
            {Array.from({ length: Math.max(1, ranks) }, (_, r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </label>
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} /> follow
        </label>
        <span className="muted" data-testid="log-stream" data-state={streaming}>
          {streaming === 'live' ? 'following (live)' : streaming === 'ended' ? 'attempt over' : ''}
        </span>
      </div>
      {error ? <p className="error" role="alert">{error}</p> : null}
      <pre className="log" ref={pre} data-testid="log-text">
        {log || '(no output yet)'}
      </pre>
    </div>
  );
}

interface Checkpoint {
  step: number;
  path: string;
  attempt: number;
  created_at: number;
}

export function Checkpoints({ jobId }: { jobId: string }) {
  const list = useLoad(
    () => call<{ checkpoints: Checkpoint[] }>('GET', `${TRAINYARD}/jobs/${encodeURIComponent(jobId)}/checkpoints`),
    [jobId],
  );
  return (
    <Show loaded={list}>
      {({ checkpoints }) =>
        checkpoints.length === 0 ? (
          <p className="muted">No checkpoints reported.</p>
        ) : (
          <table className="grid" data-testid="checkpoints-table">
            <thead>
              <tr>
                <th>Step</th>
                <th>Attempt</th>
                <th>Path</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {checkpoints.map((c) => (
                <tr key={`${c.step}-${c.path}`}>
                  <td>{c.step}</td>
                  <td>{c.attempt}</td>
                  <td>{c.path}</td>
                  <td>{formatTime(c.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )
      }
    </Show>
  );
}

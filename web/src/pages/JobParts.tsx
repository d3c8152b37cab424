// The parts of the jobs pages that read more than the job itself: the cluster's nodes, a
// job's checkpoints and its ranks' logs.
import { useEffect, useRef, useState } from 'react';
import { call, callText, TRAINYARD } from '../api';
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

// A rank's log of one attempt, read from an offset on; following polls for more while the
// job is active (the API hands out the next offset and the job's state with each chunk).
export function LogViewer({ jobId, attempts }: { jobId: string; attempts: AttemptRef[] }) {
  const last = attempts[attempts.length - 1];
  const [attempt, setAttempt] = useState(last?.attempt ?? 1);
  const [rank, setRank] = useState(0);
  const [follow, setFollow] = useState(true);
  const [log, setLog] = useState('');
  const [error, setError] = useState<string | null>(null);
  const pre = useRef<HTMLPreElement>(null);
  const ranks = attempts.find((a) => a.attempt === attempt)?.ranks ?? 1;
  useEffect(() => {
    let live = true;
    let offset = 0;
    let timer: number | undefined;
    setLog('');
    setError(null);
    const poll = async () => {
      try {
        // Drain what is there, then wait for more while following an active job.
        for (;;) {
          const r = await callText(`${TRAINYARD}/jobs/${encodeURIComponent(jobId)}/logs`, { attempt, rank, offset });
          if (!live) return;
          offset = Number(r.headers.get('X-Trainyard-Next-Offset') ?? offset);
          if (r.text) {
            setLog((l) => (l + r.text).slice(-MAX_LOG_CHARS));
            continue;
          }
          const state = r.headers.get('X-Trainyard-Job-State') ?? '';
          if (follow && (state === 'RUNNING' || state === 'PENDING')) timer = window.setTimeout(poll, 1000);
          return;
        }
      } catch (e) {
        if (live) setError(errorMessage(e));
      }
    };
    poll();
    return () => {
      live = false;
      window.clearTimeout(timer);
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

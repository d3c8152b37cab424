import { useState } from 'react';
import { call, TRAINYARD } from '../api';
import { KeyValueTable, Show } from '../components/Status';
import { ActionButton, useDecisions } from '../components/Permissions';
import { Checkpoints, Cluster, LogViewer } from './JobParts';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

interface Attempt {
  attempt: number;
  state: string;
  cause: string;
  nodes: string[];
  gpus: number;
  ranks: number;
  started_at: number;
  ended_at: number;
  resumed_from: string;
  cost_usd: number;
  paid_seconds: number;
  productive_seconds: number;
}

interface Job {
  job_id: string;
  name: string;
  project: string;
  owner: string;
  state: string;
  message: string;
  experiment_id: string;
  run_id: string;
  submitted_at: number;
  finished_at: number;
  attempts: number;
  attempt_list?: Attempt[];
  restarts: number;
  queue_position: number;
  cost_usd: number;
  goodput: number;
  spec?: { priority?: number; command?: string[] | string; resources?: Record<string, unknown> };
}

function seconds(ms: number): string {
  return ms > 0 ? formatTime(ms) : '';
}

export function Jobs() {
  const jobs = useLoad(() => call<{ jobs: Job[] }>('GET', `${TRAINYARD}/jobs`, { query: { max_results: 1000 } }), []);
  return (
    <section>
      <h2>Jobs</h2>
      <Show loaded={jobs}>
        {({ jobs: list }) =>
          list.length === 0 ? (
            <p className="muted">No jobs yet: submit one with 'trainyard submit job.yaml'.</p>
          ) : (
            <table className="grid" data-testid="jobs-table">
              <thead>
                <tr>
                  <th>Job</th>
                  <th>Name</th>
                  <th>Project</th>
                  <th>Owner</th>
                  <th>State</th>
                  <th>Priority</th>
                  <th>Queue position</th>
                  <th>Attempts</th>
                  <th>Submitted</th>
                  <th>Message</th>
                </tr>
              </thead>
              <tbody>
                {list.map((j) => (
                  <tr key={j.job_id}>
                    <td>
                      <a href={href.job(j.job_id)}>{j.job_id}</a>
                    </td>
                    <td>{j.name}</td>
                    <td>{j.project}</td>
                    <td>{j.owner}</td>
                    <td className={`state state-${j.state.toLowerCase()}`}>{j.state}</td>
                    <td>{j.spec?.priority ?? ''}</td>
                    <td>{j.queue_position > 0 ? j.queue_position : ''}</td>
                    <td>{j.attempts}</td>
                    <td>{seconds(j.submitted_at)}</td>
                    <td>{j.message}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
      <Cluster />
    </section>
  );
}

const ACTIVE_STATES = ['PENDING', 'RUNNING'];

// Cancel with a confirmation step; the server decides who may (owner, project admins,
// admins) and its refusal is shown as it is.
function CancelJob({ jobId, onDone }: { jobId: string; onDone: () => void }) {
  // Shown disabled, with the reason, when the server says this user may not cancel it.
  const decisions = useDecisions(`${TRAINYARD}/jobs/${encodeURIComponent(jobId)}/my-permissions`, undefined, [jobId]);
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const cancel = async () => {
    setBusy(true);
    setError(null);
    try {
      await call('POST', `${TRAINYARD}/jobs/${encodeURIComponent(jobId)}/cancel`, { body: {} });
      setConfirming(false);
      onDone();
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="actions">
      {confirming ? (
        <>
          <span>Cancel this job? Its running attempt is stopped.</span>
          <button type="button" onClick={cancel} disabled={busy}>
            Yes, cancel the job
          </button>
          <button type="button" onClick={() => setConfirming(false)} disabled={busy}>
            No
          </button>
        </>
      ) : (
        <ActionButton decisions={decisions} action="cancel" onClick={() => setConfirming(true)}>
          Cancel job
        </ActionButton>
      )}
      {error ? <p className="error" role="alert">{error}</p> : null}
    </div>
  );
}

export function JobDetail({ jobId }: { jobId: string }) {
  const [version, setVersion] = useState(0);
  const job = useLoad(() => call<{ job: Job }>('GET', `${TRAINYARD}/jobs/${encodeURIComponent(jobId)}`), [jobId, version]);
  return (
    <section>
      <p className="crumbs">
        <a href={href.jobs()}>Jobs</a> /
      </p>
      <Show loaded={job}>
        {({ job: j }) => {
          const attempts = j.attempt_list ?? [];
          return (
            <div data-testid="job-detail">
              <h2>
                {j.name || j.job_id}{' '}
                <span className={`state state-${j.state.toLowerCase()}`} data-testid="job-state">
                  {j.state}
                </span>
              </h2>
              {ACTIVE_STATES.includes(j.state) ? (
                <CancelJob jobId={j.job_id} onDone={() => setVersion((v) => v + 1)} />
              ) : null}
              <KeyValueTable
                empty=""
                rows={[
                  ['Job ID', j.job_id],
                  ['Project', j.project],
                  ['Owner', j.owner],
                  ['Priority', String(j.spec?.priority ?? '')],
                  ['Queue position', j.queue_position > 0 ? String(j.queue_position) : ''],
                  ['Message', j.message],
                  ['Submitted', seconds(j.submitted_at)],
                  ['Finished', seconds(j.finished_at)],
                  ['Restarts', String(j.restarts)],
                  ['Cost', `$${(j.cost_usd ?? 0).toFixed(4)}`],
                  ['Goodput', `${((j.goodput ?? 0) * 100).toFixed(1)}%`],
                  [
                    'Run',
                    j.run_id ? <a href={href.run(j.experiment_id, j.run_id)}>{j.run_id}</a> : '',
                  ],
                ]}
              />
              <h3>Attempts</h3>
              {attempts.length === 0 ? (
                <p className="muted">No attempts yet.</p>
              ) : (
                <table className="grid" data-testid="attempts-table">
                  <thead>
                    <tr>
                      <th>#</th>
                      <th>State</th>
                      <th>Cause</th>
                      <th>Nodes</th>
                      <th>GPUs</th>
                      <th>Ranks</th>
                      <th>Started</th>
                      <th>Ended</th>
                      <th>Resumed from</th>
                      <th>Cost</th>
                      <th>Productive / paid</th>
                    </tr>
                  </thead>
                  <tbody>
                    {attempts.map((a) => (
                      <tr key={a.attempt}>
                        <td>{a.attempt}</td>
                        <td>{a.state}</td>
                        <td>{a.cause}</td>
                        <td>{(a.nodes ?? []).join(', ')}</td>
                        <td>{a.gpus}</td>
                        <td>{a.ranks}</td>
                        <td>{seconds(a.started_at)}</td>
                        <td>{seconds(a.ended_at)}</td>
                        <td>{a.resumed_from}</td>
                        <td>${(a.cost_usd ?? 0).toFixed(4)}</td>
                        <td>
                          {Math.round(a.productive_seconds)} s / {Math.round(a.paid_seconds)} s
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
              <h3>Checkpoints</h3>
              <Checkpoints jobId={j.job_id} />
              <h3>Logs</h3>
              {attempts.length ? (
                <LogViewer key={attempts.length} jobId={j.job_id} attempts={attempts} />
              ) : (
                <p className="muted">No logs before the first attempt starts.</p>
              )}
            </div>
          );
        }}
      </Show>
    </section>
  );
}

import { getRun } from '../api';
import { Artifacts } from '../components/Artifacts';
import { LazyMount } from '../components/LazyMount';
import { MetricChart } from '../components/MetricChart';
import { KeyValueTable, Show } from '../components/Status';
import { href } from '../router';
import { formatNumber, formatTime, useLoad } from '../util';

export function RunDetail({ experimentId, runId }: { experimentId: string; runId: string }) {
  const run = useLoad(() => getRun(runId), [runId]);
  return (
    <section>
      <p className="crumbs">
        <a href={href.experiments()}>Experiments</a> / <a href={href.runs(experimentId)}>Experiment {experimentId}</a> /
      </p>
      <Show loaded={run}>
        {(r) => {
          const name = r.info.run_name || runId;
          const metrics = [...(r.data.metrics ?? [])].sort((a, b) => a.key.localeCompare(b.key));
          const params = [...(r.data.params ?? [])].sort((a, b) => a.key.localeCompare(b.key));
          const tags = [...(r.data.tags ?? [])].sort((a, b) => a.key.localeCompare(b.key));
          return (
            <div data-testid="run-detail" data-run-id={runId}>
              <h2>{name}</h2>
              <KeyValueTable
                testId="run-info"
                empty=""
                rows={[
                  ['Run ID', runId],
                  ['Status', r.info.status],
                  ['Started', formatTime(r.info.start_time)],
                  ['Ended', formatTime(r.info.end_time)],
                  ['User', r.info.user_id ?? ''],
                  ['Artifacts', r.info.artifact_uri ?? ''],
                  [
                    'Lineage',
                    <a href={href.lineage(`run:${runId}`)} data-testid="lineage-link">
                      data read, models produced
                    </a>,
                  ],
                ]}
              />
              <div className="columns">
                <div>
                  <h3>Parameters</h3>
                  <KeyValueTable testId="run-params" empty="No parameters." rows={params.map((p) => [p.key, p.value])} />
                </div>
                <div>
                  <h3>Metrics (latest)</h3>
                  <KeyValueTable
                    testId="run-metrics"
                    empty="No metrics."
                    rows={metrics.map((m) => [m.key, `${formatNumber(m.value)} (step ${m.step})`])}
                  />
                </div>
                <div>
                  <h3>Tags</h3>
                  <KeyValueTable testId="run-tags" empty="No tags." rows={tags.map((t) => [t.key, t.value])} />
                </div>
              </div>
              <h3>Artifacts</h3>
              <Artifacts runId={runId} artifactUri={r.info.artifact_uri ?? ''} />
              <h3>Charts</h3>
              {metrics.length === 0 ? <p className="muted">No metrics to chart.</p> : null}
              {metrics.map((m) => (
                <LazyMount key={m.key} height={280}>
                  <MetricChart metricKey={m.key} series={[{ runId, label: name }]} />
                </LazyMount>
              ))}
            </div>
          );
        }}
      </Show>
    </section>
  );
}

import { getRun } from '../api';
import { LazyMount } from '../components/LazyMount';
import { MetricChart } from '../components/MetricChart';
import { Show } from '../components/Status';
import { href } from '../router';
import { useLoad } from '../util';

// Several runs' metrics, one chart per key, every run a line.
export function Compare({ experimentId, runIds }: { experimentId: string; runIds: string[] }) {
  const runs = useLoad(() => Promise.all(runIds.map(getRun)), [runIds.join(',')]);
  return (
    <section>
      <p className="crumbs">
        <a href={href.experiments()}>Experiments</a> / <a href={href.runs(experimentId)}>Experiment {experimentId}</a> /
      </p>
      <h2>Compare {runIds.length} runs</h2>
      {runIds.length === 0 ? <p className="muted">Select runs in the runs table to compare them.</p> : null}
      <Show loaded={runs}>
        {(rs) => {
          const keys = [...new Set(rs.flatMap((r) => (r.data.metrics ?? []).map((m) => m.key)))].sort();
          const series = rs.map((r) => ({ runId: r.info.run_id, label: r.info.run_name || r.info.run_id }));
          return (
            <div data-testid="compare">
              <ul className="inline">
                {rs.map((r) => (
                  <li key={r.info.run_id}>
                    <a href={href.run(experimentId, r.info.run_id)}>{r.info.run_name || r.info.run_id}</a>
                  </li>
                ))}
              </ul>
              {keys.length === 0 ? <p className="muted">These runs logged no metrics.</p> : null}
              {keys.map((k) => (
                <LazyMount key={k} height={280}>
                  <MetricChart metricKey={k} series={series} />
                </LazyMount>
              ))}
            </div>
          );
        }}
      </Show>
    </section>
  );
}

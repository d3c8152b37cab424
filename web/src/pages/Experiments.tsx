import { useMemo, useState } from 'react';
import { searchExperiments } from '../api';
import { Show } from '../components/Status';
import { href } from '../router';
import { formatTime, useLoad } from '../util';

export function Experiments() {
  const loaded = useLoad(searchExperiments, []);
  const [filter, setFilter] = useState('');
  return (
    <section>
      <h2>Experiments</h2>
      <input
        className="search"
        placeholder="filter by name"
        value={filter}
        onChange={(e) => setFilter(e.target.value)}
        aria-label="filter experiments by name"
      />
      <Show loaded={loaded}>
        {(experiments) => <ExperimentTable experiments={experiments} filter={filter} />}
      </Show>
    </section>
  );
}

function ExperimentTable({ experiments, filter }: { experiments: Awaited<ReturnType<typeof searchExperiments>>; filter: string }) {
  const shown = useMemo(
    () => experiments.filter((e) => e.name.toLowerCase().includes(filter.toLowerCase())),
    [experiments, filter],
  );
  if (experiments.length === 0) return <p className="muted">No experiments yet: log a run with mlflow to create one.</p>;
  return (
    <table className="grid" data-testid="experiments-table">
      <thead>
        <tr>
          <th>ID</th>
          <th>Name</th>
          <th>Created</th>
          <th>Updated</th>
        </tr>
      </thead>
      <tbody>
        {shown.map((e) => (
          <tr key={e.experiment_id}>
            <td>{e.experiment_id}</td>
            <td>
              <a href={href.runs(e.experiment_id)}>{e.name}</a>
            </td>
            <td>{formatTime(e.creation_time)}</td>
            <td>{formatTime(e.last_update_time)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

import { useEffect, useMemo, useState, type FormEvent } from 'react';
import { getExperiment, searchRuns, type Run } from '../api';
import { VirtualTable, type Column } from '../components/VirtualTable';
import { href } from '../router';
import { errorMessage, formatNumber, formatTime, useLoad } from '../util';

interface Row {
  id: string;
  name: string;
  status: string;
  start: number;
  user: string;
  metrics: Record<string, number | string>;
  params: Record<string, string>;
}

type SortKey = { column: string; dir: 'asc' | 'desc' };

function toRow(r: Run): Row {
  const metrics: Record<string, number | string> = {};
  for (const m of r.data.metrics ?? []) metrics[m.key] = m.value;
  const params: Record<string, string> = {};
  for (const p of r.data.params ?? []) params[p.key] = p.value;
  const nameTag = r.data.tags?.find((t) => t.key === 'mlflow.runName')?.value;
  return {
    id: r.info.run_id,
    name: r.info.run_name || nameTag || r.info.run_id,
    status: r.info.status,
    start: r.info.start_time ?? 0,
    user: r.info.user_id ?? '',
    metrics,
    params,
  };
}

// The value a column sorts by: numbers as numbers (metrics, and params that parse), else text.
function sortValue(row: Row, column: string): number | string | undefined {
  if (column === 'name') return row.name;
  if (column === 'status') return row.status;
  if (column === 'start') return row.start;
  if (column === 'user') return row.user;
  if (column.startsWith('metric:')) {
    const v = row.metrics[column.slice(7)];
    return typeof v === 'number' ? v : v === undefined ? undefined : Number.NaN;
  }
  if (column.startsWith('param:')) {
    const v = row.params[column.slice(6)];
    if (v === undefined) return undefined;
    const n = Number(v);
    return v.trim() !== '' && Number.isFinite(n) ? n : v;
  }
  return undefined;
}

function compareRows(a: Row, b: Row, sort: SortKey): number {
  const x = sortValue(a, sort.column);
  const y = sortValue(b, sort.column);
  // Runs without the value go last either way.
  if (x === undefined || y === undefined) return x === y ? 0 : x === undefined ? 1 : -1;
  let c: number;
  if (typeof x === 'number' && typeof y === 'number') {
    c = Number.isNaN(x) ? (Number.isNaN(y) ? 0 : 1) : Number.isNaN(y) ? -1 : x - y;
  } else {
    c = String(x).localeCompare(String(y));
  }
  return sort.dir === 'asc' ? c : -c;
}

export function Runs({ experimentId }: { experimentId: string }) {
  const experiment = useLoad(() => getExperiment(experimentId), [experimentId]);
  const [filterText, setFilterText] = useState('');
  const [filter, setFilter] = useState('');
  // Runs show page by page as they arrive: the table is usable after the first page.
  const [runs, setRuns] = useState<{ runs: Run[]; done: boolean; error?: string }>({ runs: [], done: false });
  useEffect(() => {
    const abort = new AbortController();
    setRuns({ runs: [], done: false });
    searchRuns(experimentId, filter, (soFar) => abort.signal.aborted || setRuns({ runs: soFar, done: false }), abort.signal).then(
      (all) => abort.signal.aborted || setRuns({ runs: all, done: true }),
      (e: unknown) => abort.signal.aborted || setRuns({ runs: [], done: true, error: errorMessage(e) }),
    );
    return () => abort.abort();
  }, [experimentId, filter]);
  const apply = (e: FormEvent) => {
    e.preventDefault();
    setFilter(filterText.trim());
  };
  return (
    <section>
      <p className="crumbs">
        <a href={href.experiments()}>Experiments</a> /
      </p>
      <h2>
        {experiment.state === 'ok' ? experiment.value.experiment.name : `Experiment ${experimentId}`}
      </h2>
      <form className="filter" onSubmit={apply} aria-label="filter runs">
        <input
          className="search wide"
          data-testid="runs-filter"
          placeholder={'MLflow filter, e.g. metrics.loss < 0.5 and params.lr = "0.01"'}
          value={filterText}
          onChange={(e) => setFilterText(e.target.value)}
        />
        <button type="submit">Search</button>
        {filter ? (
          <button type="button" onClick={() => { setFilterText(''); setFilter(''); }}>
            Clear
          </button>
        ) : null}
      </form>
      {runs.error ? (
        <p className="error" role="alert">{runs.error}</p>
      ) : !runs.done && runs.runs.length === 0 ? (
        <p className="muted" data-testid="loading">Loading runs…</p>
      ) : (
        <RunsTable experimentId={experimentId} runs={runs.runs} loading={!runs.done} />
      )}
    </section>
  );
}

function RunsTable({ experimentId, runs, loading }: { experimentId: string; runs: Run[]; loading: boolean }) {
  const rows = useMemo(() => runs.map(toRow), [runs]);
  const { metricKeys, paramKeys } = useMemo(() => {
    const m = new Set<string>();
    const p = new Set<string>();
    for (const r of rows) {
      for (const k in r.metrics) m.add(k);
      for (const k in r.params) p.add(k);
    }
    return { metricKeys: [...m].sort(), paramKeys: [...p].sort() };
  }, [rows]);
  const [chosen, setChosen] = useState<Set<string> | null>(null);
  const shownColumns = useMemo(
    () =>
      chosen ??
      new Set([
        ...metricKeys.slice(0, 6).map((k) => `metric:${k}`),
        ...paramKeys.slice(0, 4).map((k) => `param:${k}`),
      ]),
    [chosen, metricKeys, paramKeys],
  );
  const [sort, setSort] = useState<SortKey>({ column: 'start', dir: 'desc' });
  const sorted = useMemo(() => [...rows].sort((a, b) => compareRows(a, b, sort)), [rows, sort]);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [chooserOpen, setChooserOpen] = useState(false);

  const sortBy = (column: string) => () =>
    setSort((s) => ({ column, dir: s.column === column && s.dir === 'desc' ? 'asc' : 'desc' }));
  const toggle = (id: string) =>
    setSelected((s) => {
      const n = new Set(s);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });
  const toggleColumn = (id: string) => {
    const n = new Set(shownColumns);
    if (n.has(id)) n.delete(id);
    else n.add(id);
    setChosen(n);
  };
  const sortedAs = (id: string) => (sort.column === id ? sort.dir : undefined);

  const columns: Column<Row>[] = [
    {
      id: 'select',
      header: '',
      width: 36,
      cell: (r) => (
        <input
          type="checkbox"
          aria-label={`select ${r.name}`}
          checked={selected.has(r.id)}
          onChange={() => toggle(r.id)}
        />
      ),
    },
    {
      id: 'name',
      header: 'Run',
      width: 220,
      cell: (r) => <a href={href.run(experimentId, r.id)}>{r.name}</a>,
      onHeaderClick: sortBy('name'),
      sorted: sortedAs('name'),
    },
    { id: 'status', header: 'Status', width: 90, cell: (r) => r.status, onHeaderClick: sortBy('status'), sorted: sortedAs('status') },
    { id: 'start', header: 'Started', width: 160, cell: (r) => formatTime(r.start), onHeaderClick: sortBy('start'), sorted: sortedAs('start') },
    { id: 'user', header: 'User', width: 90, cell: (r) => r.user, onHeaderClick: sortBy('user'), sorted: sortedAs('user') },
  ];
  for (const k of metricKeys) {
    const id = `metric:${k}`;
    if (!shownColumns.has(id)) continue;
    columns.push({
      id,
      header: k,
      title: `metric ${k}`,
      width: 110,
      cell: (r) => formatNumber(r.metrics[k]),
      onHeaderClick: sortBy(id),
      sorted: sortedAs(id),
    });
  }
  for (const k of paramKeys) {
    const id = `param:${k}`;
    if (!shownColumns.has(id)) continue;
    columns.push({
      id,
      header: <span className="param">{k}</span>,
      title: `param ${k}`,
      width: 110,
      cell: (r) => r.params[k] ?? '',
      onHeaderClick: sortBy(id),
      sorted: sortedAs(id),
    });
  }

  return (
    <div>
      <div className="toolbar">
        <span data-testid="runs-count" data-loading={loading}>
          {rows.length} run{rows.length === 1 ? '' : 's'}
          {loading ? ' (loading more…)' : ''}
        </span>
        <span>{selected.size} selected</span>
        <a
          className={'button' + (selected.size === 0 ? ' disabled' : '')}
          aria-disabled={selected.size === 0}
          href={selected.size ? href.compare(experimentId, [...selected]) : undefined}
          title={selected.size ? undefined : 'select runs to compare their metrics'}
          data-testid="compare-link"
        >
          Compare selected
        </a>
        <button type="button" onClick={() => setChooserOpen((o) => !o)} aria-expanded={chooserOpen}>
          Columns
        </button>
      </div>
      {chooserOpen ? (
        <div className="chooser" data-testid="column-chooser">
          <fieldset>
            <legend>Metrics</legend>
            {metricKeys.map((k) => (
              <label key={k}>
                <input type="checkbox" checked={shownColumns.has(`metric:${k}`)} onChange={() => toggleColumn(`metric:${k}`)} />{' '}
                {k}
              </label>
            ))}
          </fieldset>
          <fieldset>
            <legend>Params</legend>
            {paramKeys.map((k) => (
              <label key={k}>
                <input type="checkbox" checked={shownColumns.has(`param:${k}`)} onChange={() => toggleColumn(`param:${k}`)} />{' '}
                {k}
              </label>
            ))}
          </fieldset>
        </div>
      ) : null}
      {rows.length === 0 && !loading ? (
        <p className="muted" data-testid="no-runs">No runs match.</p>
      ) : (
        <VirtualTable rows={sorted} columns={columns} rowKey={(r) => r.id} testId="runs-table" />
      )}
    </div>
  );
}

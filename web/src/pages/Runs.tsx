import { useEffect, useMemo, useRef, useState, type FormEvent } from 'react';
import { getExperiment, listRuns, type RunListPage, type RunRow } from '../api';
import { VirtualTable, type Column } from '../components/VirtualTable';
import { href } from '../router';
import { errorMessage, formatNumber, formatTime, useLoad } from '../util';

// The table asks the server (/runs/list) for one screen of runs first, so it is usable as soon
// as that arrives, then for the rest in the background in larger pages. Sorting and filtering
// are the server's (MLflow's order_by and filter grammar over every run), so a click re-queries
// instead of sorting what happens to be loaded.
const FIRST_PAGE = 100;
const NEXT_PAGES = 2000;

type SortKey = { column: string; dir: 'asc' | 'desc' };

// The UI's column ids ("metric:acc", "param:lr") and the server's ("metrics.acc", "params.lr").
function serverColumn(id: string): string {
  const [kind, key] = id.startsWith('metric:') ? ['metrics', id.slice(7)] : ['params', id.slice(6)];
  return /^[A-Za-z0-9_.:/-]+$/.test(key) ? `${kind}.${key}` : `${kind}.\`${key}\``;
}

function uiColumn(column: string): string | null {
  const m = /^(metrics|params)\.(?:`(.*)`|(.*))$/.exec(column);
  if (!m) return null;
  return `${m[1] === 'metrics' ? 'metric' : 'param'}:${m[2] ?? m[3]}`;
}

const ATTRIBUTE_ORDER: Record<string, string> = {
  name: 'attributes.run_name',
  status: 'attributes.status',
  start: 'attributes.start_time',
  user: 'attributes.user_id',
};

function orderBy(sort: SortKey): string[] {
  const column = ATTRIBUTE_ORDER[sort.column] ?? serverColumn(sort.column);
  return [`${column} ${sort.dir === 'asc' ? 'ASC' : 'DESC'}`];
}

interface Listing {
  rows: RunRow[];
  columns: string[]; // UI ids, in the order of each row's cells
  total: number;
  done: boolean;
  error?: string;
}

const EMPTY: Listing = { rows: [], columns: [], total: 0, done: false };

// Pages through the listing for (filter, sort, columns): the first page, then the rest.
// A new query aborts the old one's requests.
function useListing(experimentId: string, filter: string, sort: SortKey, chosen: string[] | null): Listing {
  const [listing, setListing] = useState<Listing>(EMPTY);
  // The columns shown (server names), kept when sorting or filtering anew.
  const shownColumns = useRef<string[] | undefined>(undefined);
  const chosenKey = chosen ? chosen.join('\n') : null;
  useEffect(() => {
    shownColumns.current = undefined;
  }, [experimentId]);
  useEffect(() => {
    const abort = new AbortController();
    const q = {
      experimentId,
      filter,
      orderBy: orderBy(sort),
      columns: chosen && chosen.length ? chosen.map(serverColumn) : shownColumns.current,
    };
    (async () => {
      const first: RunListPage = await listRuns({ ...q, pageSize: FIRST_PAGE }, abort.signal);
      if (abort.signal.aborted) return;
      if (first.columns.length) shownColumns.current = first.columns;
      const columns = first.columns.map((c) => uiColumn(c) ?? c);
      let rows = first.runs;
      let cursor = first.next_cursor;
      setListing({ rows, columns, total: first.total ?? rows.length, done: !cursor });
      while (cursor) {
        const page = await listRuns({ ...q, columns: first.columns, pageSize: NEXT_PAGES, cursor }, abort.signal);
        if (abort.signal.aborted) return;
        rows = rows.concat(page.runs);
        cursor = page.next_cursor;
        const done = !cursor;
        const soFar = rows;
        setListing((l) => ({ ...l, rows: soFar, done }));
      }
    })().catch((e: unknown) => {
      if (!abort.signal.aborted) setListing({ ...EMPTY, done: true, error: errorMessage(e) });
    });
    return () => abort.abort();
    // chosenKey stands for `chosen`.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [experimentId, filter, sort.column, sort.dir, chosenKey]);
  return listing;
}

export function Runs({ experimentId }: { experimentId: string }) {
  const experiment = useLoad(() => getExperiment(experimentId), [experimentId]);
  const [filterText, setFilterText] = useState('');
  const [filter, setFilter] = useState('');
  const [sort, setSort] = useState<SortKey>({ column: 'start', dir: 'desc' });
  const [chosen, setChosen] = useState<string[] | null>(null);
  const listing = useListing(experimentId, filter, sort, chosen);
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
      {listing.error ? (
        <p className="error" role="alert">{listing.error}</p>
      ) : !listing.done && listing.rows.length === 0 ? (
        <p className="muted" data-testid="loading">Loading runs…</p>
      ) : (
        <RunsTable
          experimentId={experimentId}
          listing={listing}
          sort={sort}
          setSort={setSort}
          chosen={chosen}
          setChosen={setChosen}
        />
      )}
    </section>
  );
}

function RunsTable({
  experimentId,
  listing,
  sort,
  setSort,
  chosen,
  setChosen,
}: {
  experimentId: string;
  listing: Listing;
  sort: SortKey;
  setSort: (f: (s: SortKey) => SortKey) => void;
  chosen: string[] | null;
  setChosen: (c: string[]) => void;
}) {
  const { rows, columns: shown, total, done } = listing;
  // The chooser's keys are every run's (a read of them all on the server): asked for when it
  // first opens, not before the table shows.
  const [chooserOpen, setChooserOpen] = useState(false);
  const [keys, setKeys] = useState<{ metric: string[]; param: string[] } | null>(null);
  useEffect(() => {
    if (!chooserOpen || keys) return;
    const abort = new AbortController();
    listRuns({ experimentId, filter: '', orderBy: [], pageSize: 1, withKeys: true }, abort.signal).then(
      (k) => setKeys({ metric: k.metric_keys ?? [], param: k.param_keys ?? [] }),
      () => {}, // the chooser stays empty; the table says what went wrong with the server
    );
    return () => abort.abort();
  }, [chooserOpen, keys, experimentId]);
  const metricKeys = keys?.metric ?? [];
  const paramKeys = keys?.param ?? [];
  const cellIndex = useMemo(() => new Map(shown.map((c, i) => [c, i])), [shown]);
  const [selected, setSelected] = useState<Set<string>>(new Set());

  const sortBy = (column: string) => () =>
    setSort((s) => ({ column, dir: s.column === column && s.dir === 'desc' ? 'asc' : 'desc' }));
  const toggle = (id: string) =>
    setSelected((s) => {
      const n = new Set(s);
      if (n.has(id)) n.delete(id);
      else n.add(id);
      return n;
    });
  // The chooser shows the choice at once; the table's columns follow when the server answers.
  const picked = chosen ?? shown;
  const toggleColumn = (id: string) => {
    setChosen(picked.includes(id) ? picked.filter((c) => c !== id) : [...picked, id]);
  };
  const sortedAs = (id: string) => (sort.column === id ? sort.dir : undefined);
  const cell = (r: RunRow, id: string) => {
    const i = cellIndex.get(id);
    return i === undefined ? null : r.cells[i];
  };

  const columns: Column<RunRow>[] = [
    {
      id: 'select',
      header: '',
      width: 36,
      cell: (r) => (
        <input
          type="checkbox"
          aria-label={`select ${r.run_name || r.run_id}`}
          checked={selected.has(r.run_id)}
          onChange={() => toggle(r.run_id)}
        />
      ),
    },
    {
      id: 'name',
      header: 'Run',
      width: 220,
      cell: (r) => <a href={href.run(experimentId, r.run_id)}>{r.run_name || r.run_id}</a>,
      onHeaderClick: sortBy('name'),
      sorted: sortedAs('name'),
    },
    { id: 'status', header: 'Status', width: 90, cell: (r) => r.status, onHeaderClick: sortBy('status'), sorted: sortedAs('status') },
    { id: 'start', header: 'Started', width: 160, cell: (r) => formatTime(r.start_time ?? 0), onHeaderClick: sortBy('start'), sorted: sortedAs('start') },
    { id: 'user', header: 'User', width: 90, cell: (r) => r.user_id, onHeaderClick: sortBy('user'), sorted: sortedAs('user') },
  ];
  for (const id of shown) {
    if (!picked.includes(id)) continue; // unchecked (an empty choice gets the server's default)
    const isMetric = id.startsWith('metric:');
    const k = isMetric ? id.slice(7) : id.slice(6);
    columns.push({
      id,
      header: isMetric ? k : <span className="param">{k}</span>,
      title: `${isMetric ? 'metric' : 'param'} ${k}`,
      width: 110,
      cell: (r) => {
        const v = cell(r, id);
        return v === null || v === undefined ? '' : isMetric ? formatNumber(v) : String(v);
      },
      onHeaderClick: sortBy(id),
      sorted: sortedAs(id),
    });
  }
  const loading = !done;

  return (
    <div>
      <div className="toolbar">
        <span data-testid="runs-count" data-loading={loading} data-loaded={rows.length}>
          {total} run{total === 1 ? '' : 's'}
          {loading ? ` (${rows.length} loaded…)` : ''}
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
        <div className="chooser" data-testid="column-chooser" data-loaded={keys !== null}>
          <fieldset>
            <legend>Metrics</legend>
            {metricKeys.map((k) => (
              <label key={k}>
                <input type="checkbox" checked={picked.includes(`metric:${k}`)} onChange={() => toggleColumn(`metric:${k}`)} />{' '}
                {k}
              </label>
            ))}
          </fieldset>
          <fieldset>
            <legend>Params</legend>
            {paramKeys.map((k) => (
              <label key={k}>
                <input type="checkbox" checked={picked.includes(`param:${k}`)} onChange={() => toggleColumn(`param:${k}`)} />{' '}
                {k}
              </label>
            ))}
          </fieldset>
        </div>
      ) : null}
      {rows.length === 0 && !loading ? (
        <p className="muted" data-testid="no-runs">No runs match.</p>
      ) : (
        <VirtualTable rows={rows} columns={columns} rowKey={(r) => r.run_id} testId="runs-table" />
      )}
    </div>
  );
}

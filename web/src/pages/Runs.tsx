import { useCallback, useEffect, useMemo, useRef, useState, type FormEvent } from 'react';
import { getExperiment, listRuns, type Experiment, type ListRunsQuery, type RunListPage, type RunRow } from '../api';
import { VirtualTable, type Column } from '../components/VirtualTable';
import { experimentKey, FIRST_RUNS_PAGE, runsKey, takePrefetched } from '../prefetch';
import { href } from '../router';
import { errorMessage, formatNumber, formatTime, useLoad } from '../util';

// The table asks the server (/runs/list) for one screen of runs first, so it is usable as soon
// as that arrives (the entry module has usually asked already: prefetch.ts), then for more in
// larger pages as the view scrolls towards rows not loaded yet: a table of 10,000 runs never
// parses and renders pages nobody looks at while the user sorts or filters. Sorting and
// filtering are the server's (MLflow's order_by and filter grammar over every run), so a click
// re-queries instead of sorting what happens to be loaded.
const FIRST_PAGE = FIRST_RUNS_PAGE;
const NEXT_PAGES = 2000;
// How near the last row in view may come to the end of those loaded before the next page is
// asked for (below the first page, so that opening the table asks for nothing more).
const AHEAD = 50;

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

// The first page of the query, prefetched when it is the page's opening one.
function firstPage(q: ListRunsQuery, signal: AbortSignal): Promise<RunListPage> {
  return takePrefetched<RunListPage>(runsKey(q)) ?? listRuns(q, signal);
}

// Pages through the listing for (filter, sort, columns): the first page, then more while the
// rows in view (`wanted`: one past the last row the table shows) reach beyond those loaded.
// A new query aborts the old one's requests.
function useListing(
  experimentId: string,
  filter: string,
  sort: SortKey,
  chosen: string[] | null,
): Listing & { want: (rows: number) => void } {
  const [listing, setListing] = useState<Listing>(EMPTY);
  const [wanted, setWanted] = useState(0);
  // The columns shown (server names), kept when sorting or filtering anew.
  const shownColumns = useRef<string[] | undefined>(undefined);
  // The current query's next page: its cursor and the request that reads it.
  const more = useRef<{ query: ListRunsQuery; cursor?: string; signal: AbortSignal; loading: boolean } | null>(null);
  const chosenKey = chosen ? chosen.join('\n') : null;
  useEffect(() => {
    shownColumns.current = undefined;
  }, [experimentId]);
  useEffect(() => {
    const abort = new AbortController();
    const columns = chosen && chosen.length ? chosen.map(serverColumn) : shownColumns.current;
    const q: ListRunsQuery = { experimentId, filter, orderBy: orderBy(sort), pageSize: FIRST_PAGE };
    if (columns) q.columns = columns;
    more.current = null;
    setWanted(0);
    firstPage(q, abort.signal).then(
      (first) => {
        if (abort.signal.aborted) return;
        if (first.columns.length) shownColumns.current = first.columns;
        more.current = {
          query: { ...q, columns: first.columns, pageSize: NEXT_PAGES },
          cursor: first.next_cursor,
          signal: abort.signal,
          loading: false,
        };
        setListing({
          rows: first.runs,
          columns: first.columns.map((c) => uiColumn(c) ?? c),
          total: first.total ?? first.runs.length,
          done: !first.next_cursor,
        });
      },
      (e: unknown) => {
        if (!abort.signal.aborted) setListing({ ...EMPTY, done: true, error: errorMessage(e) });
      },
    );
    return () => abort.abort();
    // chosenKey stands for `chosen`.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [experimentId, filter, sort.column, sort.dir, chosenKey]);
  // The next page when the view reaches past the rows loaded (one request at a time).
  useEffect(() => {
    const m = more.current;
    if (!m || !m.cursor || m.loading || wanted + AHEAD <= listing.rows.length) return;
    m.loading = true;
    listRuns({ ...m.query, cursor: m.cursor }, m.signal).then(
      (page) => {
        if (m.signal.aborted) return;
        m.cursor = page.next_cursor;
        m.loading = false;
        const done = !page.next_cursor;
        setListing((l) => ({ ...l, rows: l.rows.concat(page.runs), done }));
      },
      (e: unknown) => {
        if (!m.signal.aborted) setListing((l) => ({ ...l, done: true, error: errorMessage(e) }));
      },
    );
  }, [wanted, listing.rows.length]);
  const want = useCallback((rows: number) => setWanted((w) => Math.max(w, rows)), []);
  return { ...listing, want };
}

export function Runs({ experimentId }: { experimentId: string }) {
  const experiment = useLoad(
    () => takePrefetched<{ experiment: Experiment }>(experimentKey(experimentId)) ?? getExperiment(experimentId),
    [experimentId],
  );
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
  listing: Listing & { want: (rows: number) => void };
  sort: SortKey;
  setSort: (f: (s: SortKey) => SortKey) => void;
  chosen: string[] | null;
  setChosen: (c: string[]) => void;
}) {
  const { rows, columns: shown, total, done, want } = listing;
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
          {loading ? ` (${rows.length} loaded; more as you scroll)` : ''}
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
        <VirtualTable
          rows={rows}
          totalRows={done ? rows.length : Math.max(total, rows.length)}
          onNeed={want}
          columns={columns}
          rowKey={(r) => r.run_id}
          testId="runs-table"
        />
      )}
    </div>
  );
}

// The catalog browser: catalogs → schemas → tables (and the schema's volumes and registered
// models), and a table's page: its columns (types, comments, masks), its Delta history, a
// preview of its first rows read through the tables API (so the row filter and column masks
// apply to the reader, as for any client), its grants, and a link to its lineage.
import { useState } from 'react';
import { call, callText, TRAINYARD } from '../api';
import { ActionButton, useDecisions, type Decisions } from '../components/Permissions';
import { KeyValueTable, Show } from '../components/Status';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

const UC = '/api/2.1/unity-catalog';
const PREVIEW_ROWS = 20;

interface UcObject {
  name: string;
  full_name?: string;
  comment?: string;
  owner?: string;
  created_at?: number;
  updated_at?: number;
}

interface UcColumn {
  name: string;
  type_text: string;
  nullable?: boolean;
  comment?: string;
  position?: number;
  mask?: { kind: string; except: string[] };
}

interface UcTable extends UcObject {
  table_type?: string;
  data_source_format?: string;
  columns?: UcColumn[];
  row_filter?: { predicate?: string };
}

interface TableDescription {
  full_name: string;
  version: number;
  timestamp_ms: number;
  num_rows: number;
  num_files: number;
  size_bytes: number;
  columns: { name: string; type: string; mask?: { kind: string; except: string[]; applies_to_caller: boolean } }[];
  row_filter?: { predicate: string; applies_to_caller: boolean };
}

interface HistoryEntry {
  version: number;
  timestamp_ms: number;
  operation: string;
  user_name?: string; // who made the version (commitInfo.userName); absent for other writers
  operation_parameters?: Record<string, string>;
  operation_metrics?: Record<string, string>;
  engine_info?: string;
}

// Every page of a UC listing.
async function listAll<T>(path: string, field: string, query: Record<string, string> = {}): Promise<T[]> {
  const out: T[] = [];
  let page_token: string | undefined;
  do {
    const r = await call<Record<string, unknown> & { next_page_token?: string }>('GET', `${UC}${path}`, {
      query: { ...query, max_results: 1000, page_token },
    });
    out.push(...((r[field] as T[] | undefined) ?? []));
    page_token = r.next_page_token || undefined;
  } while (page_token);
  return out;
}

function ObjectTable({ rows, link, testId, empty }: {
  rows: UcObject[];
  link: (o: UcObject) => string | null;
  testId: string;
  empty: string;
}) {
  if (rows.length === 0) return <p className="muted">{empty}</p>;
  return (
    <table className="grid" data-testid={testId}>
      <thead>
        <tr>
          <th>Name</th>
          <th>Owner</th>
          <th>Comment</th>
          <th>Updated</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((o) => {
          const to = link(o);
          return (
            <tr key={o.name}>
              <td>{to ? <a href={to}>{o.name}</a> : o.name}</td>
              <td>{o.owner ?? ''}</td>
              <td>{o.comment ?? ''}</td>
              <td>{formatTime(o.updated_at ?? o.created_at)}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

export function Catalogs() {
  const catalogs = useLoad(() => listAll<UcObject>('/catalogs', 'catalogs'), []);
  return (
    <section>
      <h2>Catalogs</h2>
      <Show loaded={catalogs}>
        {(list) => (
          <ObjectTable
            rows={list}
            link={(o) => href.catalog(o.name)}
            testId="catalogs-table"
            empty="No catalogs you may use: create one with 'trainyard catalogs create' or ask for USE CATALOG."
          />
        )}
      </Show>
    </section>
  );
}

export function CatalogPage({ catalog }: { catalog: string }) {
  const schemas = useLoad(() => listAll<UcObject>('/schemas', 'schemas', { catalog_name: catalog }), [catalog]);
  return (
    <section>
      <p className="crumbs">
        <a href={href.catalogs()}>Catalog</a> /
      </p>
      <h2>{catalog}</h2>
      <h3>Schemas</h3>
      <Show loaded={schemas}>
        {(list) => (
          <ObjectTable rows={list} link={(o) => href.schema(catalog, o.name)} testId="schemas-table" empty="No schemas." />
        )}
      </Show>
    </section>
  );
}

export function SchemaPage({ catalog, schema }: { catalog: string; schema: string }) {
  const scope = { catalog_name: catalog, schema_name: schema };
  const loaded = useLoad(
    () =>
      Promise.all([
        listAll<UcTable>('/tables', 'tables', scope),
        listAll<UcObject>('/volumes', 'volumes', scope).catch(() => []),
        listAll<UcObject>('/models', 'registered_models', scope).catch(() => []),
      ]),
    [catalog, schema],
  );
  return (
    <section>
      <p className="crumbs">
        <a href={href.catalogs()}>Catalog</a> / <a href={href.catalog(catalog)}>{catalog}</a> /
      </p>
      <h2>
        {catalog}.{schema}
      </h2>
      <Show loaded={loaded}>
        {([tables, volumes, models]) => (
          <>
            <h3>Tables</h3>
            <ObjectTable
              rows={tables}
              link={(o) => href.table(o.full_name ?? `${catalog}.${schema}.${o.name}`)}
              testId="tables-table"
              empty="No tables you may see."
            />
            <h3>Volumes</h3>
            <ObjectTable rows={volumes} link={() => null} testId="volumes-table" empty="No volumes." />
            <h3>Registered models</h3>
            <ObjectTable
              rows={models}
              link={(o) => href.model(o.full_name ?? `${catalog}.${schema}.${o.name}`)}
              testId="uc-models-table"
              empty="No registered models."
            />
          </>
        )}
      </Show>
    </section>
  );
}

function maskText(mask?: { kind: string; except: string[]; applies_to_caller?: boolean }): string {
  if (!mask) return '';
  const except = mask.except.length ? ` except ${mask.except.join(', ')}` : '';
  const you = mask.applies_to_caller === undefined ? '' : mask.applies_to_caller ? ' (masked for you)' : ' (not for you)';
  return `${mask.kind}${except}${you}`;
}

function cellText(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

// The first rows of the table, as the reader may see them (row filter and masks applied by
// the server).
function RowPreview({ fullName, columns }: { fullName: string; columns: string[] }) {
  const rows = useLoad(async () => {
    const { text, headers } = await callText(`${TRAINYARD}/tables/${encodeURIComponent(fullName)}/rows`, {
      format: 'jsonl',
      max_rows: PREVIEW_ROWS,
    });
    const records = text
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    return { records, more: headers.has('X-Trainyard-Next-Page-Token') };
  }, [fullName]);
  return (
    <Show loaded={rows}>
      {({ records, more }) =>
        records.length === 0 ? (
          <p className="muted">No rows you may see.</p>
        ) : (
          <>
            <table className="grid" data-testid="table-preview">
              <thead>
                <tr>
                  {columns.map((c) => (
                    <th key={c}>{c}</th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {records.map((r, i) => (
                  <tr key={i}>
                    {columns.map((c) => (
                      <td key={c}>{cellText(r[c])}</td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
            <p className="muted">
              The first {records.length} rows{more ? ' (more exist)' : ''}, read through the tables API: the
              table's row filter and column masks apply to you.
            </p>
          </>
        )
      }
    </Show>
  );
}

const TABLE_PRIVILEGES = ['SELECT', 'MODIFY', 'MANAGE', 'ALL PRIVILEGES'];

// The table's grants, and (for its owner, admins and MANAGE holders) a form to grant or revoke.
function Grants({ fullName, decisions }: { fullName: string; decisions: Decisions | null }) {
  const [reloads, setReloads] = useState(0);
  const [principal, setPrincipal] = useState('');
  const [privilege, setPrivilege] = useState('SELECT');
  const [error, setError] = useState<string | null>(null);
  const path = `${UC}/permissions/table/${encodeURIComponent(fullName)}`;
  const [catalog, schema] = fullName.split('.');
  // The table's own grants and those it inherits from its schema and catalog (those two may
  // be hidden from the reader: then only the table's are shown).
  const grants = useLoad(async () => {
    type Assignments = { privilege_assignments?: { principal: string; privileges: string[] }[] };
    const levels: [string, string][] = [
      [`table ${fullName}`, path],
      [`schema ${catalog}.${schema}`, `${UC}/permissions/schema/${encodeURIComponent(`${catalog}.${schema}`)}`],
      [`catalog ${catalog}`, `${UC}/permissions/catalog/${encodeURIComponent(catalog)}`],
    ];
    const answers = await Promise.all(
      levels.map(([, p], i) =>
        call<Assignments>('GET', p).catch((e): Assignments => {
          if (i === 0) throw e;
          return {};
        }),
      ),
    );
    return answers.flatMap((a, i) =>
      (a.privilege_assignments ?? []).map((g) => ({ on: levels[i][0], principal: g.principal, privileges: g.privileges })),
    );
  }, [fullName, reloads]);
  const change = async (op: 'add' | 'remove') => {
    setError(null);
    if (!principal.trim()) {
      setError('Name the user, group or service principal.');
      return;
    }
    try {
      await call('PATCH', path, { body: { changes: [{ principal: principal.trim(), [op]: [privilege] }] } });
      setReloads((n) => n + 1);
    } catch (e) {
      setError(errorMessage(e));
    }
  };
  const denied = decisions?.manage && !decisions.manage.allowed;
  return (
    <>
      <Show loaded={grants}>
        {(list) =>
          list.length === 0 ? (
            <p className="muted">No grants on the table, its schema or its catalog.</p>
          ) : (
            <table className="grid" data-testid="table-grants">
              <thead>
                <tr>
                  <th>Principal</th>
                  <th>Privileges</th>
                  <th>Granted on</th>
                </tr>
              </thead>
              <tbody>
                {list.map((g) => (
                  <tr key={`${g.on} ${g.principal}`}>
                    <td>{g.principal}</td>
                    <td>{g.privileges.join(', ')}</td>
                    <td>{g.on}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
      <form className="actions" aria-label="change grants" onSubmit={(e) => e.preventDefault()}>
        <input
          value={principal}
          onChange={(e) => setPrincipal(e.target.value)}
          placeholder="principal"
          aria-label="principal"
          disabled={!!denied}
        />
        <select value={privilege} onChange={(e) => setPrivilege(e.target.value)} aria-label="privilege" disabled={!!denied}>
          {TABLE_PRIVILEGES.map((p) => (
            <option key={p}>{p}</option>
          ))}
        </select>
        <ActionButton decisions={decisions} action="manage" onClick={() => change('add')}>
          Grant
        </ActionButton>
        {denied ? null : (
          <button type="button" onClick={() => change('remove')} disabled={decisions === null}>
            Revoke
          </button>
        )}
        {error ? <p className="error" role="alert">{error}</p> : null}
      </form>
    </>
  );
}

export function TablePage({ fullName }: { fullName: string }) {
  const [catalog, schema] = fullName.split('.');
  const loaded = useLoad(
    () =>
      Promise.all([
        call<UcTable>('GET', `${UC}/tables/${encodeURIComponent(fullName)}`),
        call<TableDescription>('GET', `${TRAINYARD}/tables/${encodeURIComponent(fullName)}`),
        call<{ history: HistoryEntry[] }>('GET', `${TRAINYARD}/tables/${encodeURIComponent(fullName)}/history`, {
          query: { limit: 50 },
        }),
      ]),
    [fullName],
  );
  const decisions = useDecisions(`${TRAINYARD}/tables/${encodeURIComponent(fullName)}/my-permissions`);
  return (
    <section>
      <p className="crumbs">
        <a href={href.catalogs()}>Catalog</a> / <a href={href.catalog(catalog)}>{catalog}</a> /{' '}
        <a href={href.schema(catalog, schema)}>{schema}</a> /
      </p>
      <h2>{fullName}</h2>
      <Show loaded={loaded}>
        {([uc, d, { history }]) => {
          const masks = new Map(d.columns.map((c) => [c.name, c.mask]));
          const columns = [...(uc.columns ?? [])].sort((a, b) => (a.position ?? 0) - (b.position ?? 0));
          return (
            <div data-testid="table-detail">
              <KeyValueTable
                testId="table-info"
                empty=""
                rows={[
                  ['Owner', uc.owner ?? ''],
                  ['Type', `${uc.table_type ?? ''} ${uc.data_source_format ?? ''}`],
                  ['Comment', uc.comment ?? ''],
                  ['Version', String(d.version)],
                  ['Rows', String(d.num_rows)],
                  ['Files', `${d.num_files} (${d.size_bytes} bytes)`],
                  ['Row filter', d.row_filter ? `${d.row_filter.predicate}${d.row_filter.applies_to_caller ? ' (applies to you)' : ''}` : 'none'],
                  [
                    'Lineage',
                    <a href={href.lineage(`table:${fullName}@${d.version}`)} data-testid="lineage-link">
                      upstream and downstream of version {d.version}
                    </a>,
                  ],
                ]}
              />
              <h3>Columns</h3>
              <table className="grid" data-testid="table-columns">
                <thead>
                  <tr>
                    <th>Name</th>
                    <th>Type</th>
                    <th>Nullable</th>
                    <th>Comment</th>
                    <th>Mask</th>
                  </tr>
                </thead>
                <tbody>
                  {columns.map((c) => (
                    <tr key={c.name}>
                      <td>{c.name}</td>
                      <td>{c.type_text}</td>
                      <td>{c.nullable === false ? 'no' : 'yes'}</td>
                      <td>{c.comment ?? ''}</td>
                      <td>{maskText(masks.get(c.name))}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <h3>Preview</h3>
              <RowPreview fullName={fullName} columns={columns.map((c) => c.name)} />
              <h3>History</h3>
              <table className="grid" data-testid="table-history">
                <thead>
                  <tr>
                    <th>Version</th>
                    <th>Time</th>
                    <th>Operation</th>
                    <th>User</th>
                    <th>Parameters</th>
                    <th>Metrics</th>
                    <th>Lineage</th>
                  </tr>
                </thead>
                <tbody>
                  {history.map((h) => (
                    <tr key={h.version}>
                      <td>{h.version}</td>
                      <td>{formatTime(h.timestamp_ms)}</td>
                      <td>{h.operation}</td>
                      <td data-testid="history-user">{h.user_name ?? ''}</td>
                      <td>{Object.entries(h.operation_parameters ?? {}).map(([k, v]) => `${k}=${v}`).join(' ')}</td>
                      <td>{Object.entries(h.operation_metrics ?? {}).map(([k, v]) => `${k}=${v}`).join(' ')}</td>
                      <td>
                        <a href={href.lineage(`table:${fullName}@${h.version}`)}>graph</a>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
              <h3>Grants</h3>
              <Grants fullName={fullName} decisions={decisions} />
            </div>
          );
        }}
      </Show>
    </section>
  );
}

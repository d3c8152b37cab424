// The lineage graph around one object (a table version, run, model version, job, checkpoint or
// endpoint), from GET /api/trainyard/v1/lineage, drawn left to right in SVG: upstream objects to
// the left of it, downstream ones to the right. Clicking a node opens that object's page.
import { useState } from 'react';
import { call, getRun, TRAINYARD } from '../api';
import { Show } from '../components/Status';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

interface LineageNode {
  id: number;
  type: string;
  key?: string;
  version?: number;
  display_name?: string;
  created_at?: number;
  depth: number;
  redacted: boolean;
}

interface LineageEdge {
  from: number;
  to: number;
  kind: string;
  job_id?: string;
  run_id?: string;
  created_at?: number;
  recorded_by?: string;
}

interface LineageGraph {
  root: number;
  nodes: LineageNode[];
  edges: LineageEdge[];
  truncated: boolean;
}

const NODE_W = 190;
const NODE_H = 42;
const COL_GAP = 90;
const ROW_GAP = 18;

// Columns: the root at 0, what it was made from at -1, -2, ..., what was made from it at 1, 2, ...
export function layout(g: LineageGraph): Map<number, { col: number; row: number }> {
  const col = new Map<number, number>([[g.root, 0]]);
  const queue = [g.root];
  while (queue.length) {
    const id = queue.shift()!;
    const c = col.get(id)!;
    for (const e of g.edges) {
      // Upstream of the root walks edges backwards, downstream forwards; a node reached both
      // ways keeps its first column.
      if (e.to === id && c <= 0 && !col.has(e.from)) {
        col.set(e.from, c - 1);
        queue.push(e.from);
      }
      if (e.from === id && c >= 0 && !col.has(e.to)) {
        col.set(e.to, c + 1);
        queue.push(e.to);
      }
    }
  }
  for (const n of g.nodes) if (!col.has(n.id)) col.set(n.id, n.depth);
  const rows = new Map<number, number>();
  const out = new Map<number, { col: number; row: number }>();
  for (const n of [...g.nodes].sort((a, b) => a.id - b.id)) {
    const c = col.get(n.id)!;
    const r = rows.get(c) ?? 0;
    rows.set(c, r + 1);
    out.set(n.id, { col: c, row: r });
  }
  return out;
}

function label(n: LineageNode): string {
  if (n.redacted) return '(no access)';
  const base = n.display_name || n.key || '';
  if (n.type === 'table' || n.type === 'model_version' || n.type === 'checkpoint') {
    return n.version !== undefined && !base.includes('@') ? `${base} @${n.version}` : base;
  }
  return base;
}

export function objectName(n: LineageNode): string {
  return `${n.type}:${n.key}${n.version !== undefined ? `@${n.version}` : ''}`;
}

// Opens the page of the object a node stands for.
async function open(n: LineageNode): Promise<void> {
  if (n.redacted || !n.key) return;
  const key = n.key;
  switch (n.type) {
    case 'table':
      window.location.hash = href.table(key);
      return;
    case 'run': {
      const run = await getRun(key);
      window.location.hash = href.run(run.info.experiment_id, key);
      return;
    }
    case 'job':
    case 'checkpoint':
      window.location.hash = href.job(key);
      return;
    case 'model_version':
      window.location.hash = href.modelVersion(key, String(n.version ?? ''));
      return;
    case 'endpoint':
      window.location.hash = href.endpoint(key);
      return;
  }
}

function Graph({ g }: { g: LineageGraph }) {
  const [error, setError] = useState<string | null>(null);
  const pos = layout(g);
  const cols = [...pos.values()].map((p) => p.col);
  const minCol = Math.min(...cols);
  const maxCol = Math.max(...cols);
  const maxRow = Math.max(...[...pos.values()].map((p) => p.row));
  const x = (id: number) => (pos.get(id)!.col - minCol) * (NODE_W + COL_GAP) + 10;
  const y = (id: number) => pos.get(id)!.row * (NODE_H + ROW_GAP) + 10;
  const width = (maxCol - minCol + 1) * (NODE_W + COL_GAP) - COL_GAP + 20;
  const height = (maxRow + 1) * (NODE_H + ROW_GAP) - ROW_GAP + 20;
  return (
    <>
      <svg width={width} height={height} data-testid="lineage-graph" role="img" aria-label="lineage graph">
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
            <path d="M0,0 L10,5 L0,10 z" fill="#8b93a3" />
          </marker>
        </defs>
        {g.edges.map((e, i) => {
          if (!pos.has(e.from) || !pos.has(e.to)) return null;
          const x1 = x(e.from) + NODE_W;
          const y1 = y(e.from) + NODE_H / 2;
          const x2 = x(e.to);
          const y2 = y(e.to) + NODE_H / 2;
          const mid = (x1 + x2) / 2;
          return (
            <g key={i}>
              <path className="edge" d={`M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`} markerEnd="url(#arrow)" />
              <text className="edge-kind" x={mid} y={(y1 + y2) / 2 - 4} textAnchor="middle">
                {e.kind}
              </text>
            </g>
          );
        })}
        {g.nodes.map((n) => (
          <g
            key={n.id}
            className={`node${n.id === g.root ? ' root' : ''}${n.redacted ? ' redacted' : ''}`}
            transform={`translate(${x(n.id)},${y(n.id)})`}
            data-testid="lineage-node"
            data-node-type={n.type}
            data-node-key={n.key ?? ''}
            data-root={n.id === g.root ? 'true' : 'false'}
            role="link"
            aria-label={`${n.type} ${label(n)}`}
            onClick={() => open(n).catch((e) => setError(errorMessage(e)))}
          >
            <title>{n.redacted ? `a ${n.type} you may not read` : `${objectName(n)}${n.created_at ? `, ${formatTime(n.created_at)}` : ''}`}</title>
            <rect width={NODE_W} height={NODE_H} rx={4} />
            <text className="type" x={8} y={14}>
              {n.type.replace('_', ' ')}
            </text>
            <text x={8} y={31}>
              {label(n).length > 28 ? `${label(n).slice(0, 27)}…` : label(n)}
            </text>
          </g>
        ))}
      </svg>
      {error ? <p className="error" role="alert">{error}</p> : null}
    </>
  );
}

export function Lineage({ object }: { object: string }) {
  const [direction, setDirection] = useState('both');
  const [depth, setDepth] = useState(3);
  const graph = useLoad(
    () =>
      call<LineageGraph>('GET', `${TRAINYARD}/lineage`, {
        query: { object, direction, depth, max_nodes: 200 },
      }),
    [object, direction, depth],
  );
  return (
    <section className="lineage">
      <h2>Lineage of {object || '…'}</h2>
      <div className="toolbar">
        <label>
          Direction{' '}
          <select value={direction} onChange={(e) => setDirection(e.target.value)} aria-label="direction">
            <option value="both">upstream and downstream</option>
            <option value="upstream">upstream</option>
            <option value="downstream">downstream</option>
          </select>
        </label>
        <label>
          Depth{' '}
          <select value={depth} onChange={(e) => setDepth(Number(e.target.value))} aria-label="depth">
            {[1, 2, 3, 5, 10].map((d) => (
              <option key={d} value={d}>
                {d}
              </option>
            ))}
          </select>
        </label>
        <span className="muted">Click an object to open it.</span>
      </div>
      {!object ? (
        <p className="error">Name an object: #/lineage?object=table:catalog.schema.table@VERSION</p>
      ) : (
        <Show loaded={graph}>
          {(g) =>
            g.nodes.length <= 1 && g.edges.length === 0 ? (
              <p className="muted" data-testid="lineage-empty">Nothing is recorded upstream or downstream of it yet.</p>
            ) : (
              <>
                <Graph g={g} />
                {g.truncated ? <p className="muted">More exists: raise the depth, or start from another object.</p> : null}
              </>
            )
          }
        </Show>
      )}
    </section>
  );
}

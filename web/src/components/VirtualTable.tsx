import { useCallback, useEffect, useRef, useState, type ReactNode } from 'react';

export interface Column<T> {
  id: string;
  header: ReactNode;
  width: number;
  cell: (row: T) => ReactNode;
  title?: string;
  onHeaderClick?: () => void;
  sorted?: 'asc' | 'desc';
}

// A table that renders only the rows in view (plus a few around them): 10,000 rows cost
// what 40 do. Rows have a fixed height; scrolling updates at most once per animation frame.
// `totalRows` (at least rows.length) sizes the scroll range when not all rows are loaded yet:
// rows past those loaded show as pending, and `onNeed` hears one past the last row in view,
// so the owner can load up to there.
export function VirtualTable<T>({
  rows,
  totalRows,
  onNeed,
  columns,
  rowKey,
  rowHeight = 28,
  height = 560,
  testId,
}: {
  rows: T[];
  totalRows?: number;
  onNeed?: (rows: number) => void;
  columns: Column<T>[];
  rowKey: (row: T) => string;
  rowHeight?: number;
  height?: number;
  testId?: string;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const frame = useRef<number | null>(null);
  const onScroll = useCallback(() => {
    if (frame.current !== null) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = null;
      if (scroller.current) setScrollTop(scroller.current.scrollTop);
    });
  }, []);
  useEffect(() => () => {
    if (frame.current !== null) cancelAnimationFrame(frame.current);
  }, []);
  const overscan = 10;
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const count = Math.max(totalRows ?? 0, rows.length);
  const end = Math.min(count, Math.ceil((scrollTop + height) / rowHeight) + overscan);
  const last = Math.min(rows.length, end);
  const totalWidth = columns.reduce((w, c) => w + c.width, 0);
  const visible = rows.slice(first, last);
  const pending: number[] = [];
  for (let i = Math.max(first, last); i < end; ++i) pending.push(i);
  useEffect(() => {
    onNeed?.(end);
  }, [onNeed, end, rows.length]);
  return (
    <div className="vtable" data-testid={testId} data-rows={rows.length}>
      <div className="vtable-scroll" ref={scroller} onScroll={onScroll} style={{ height }}>
        <div className="vtable-head" style={{ width: totalWidth }} role="row">
          {columns.map((c) => (
            <div
              key={c.id}
              role="columnheader"
              className={'vtable-cell vtable-th' + (c.onHeaderClick ? ' sortable' : '')}
              style={{ width: c.width }}
              title={c.title}
              onClick={c.onHeaderClick}
              data-column={c.id}
              aria-sort={c.sorted === 'asc' ? 'ascending' : c.sorted === 'desc' ? 'descending' : undefined}
            >
              {c.header}
              {c.sorted === 'asc' ? ' ▲' : c.sorted === 'desc' ? ' ▼' : ''}
            </div>
          ))}
        </div>
        <div style={{ height: count * rowHeight, width: totalWidth, position: 'relative' }}>
          {visible.map((row, i) => (
            <div
              key={rowKey(row)}
              className="vtable-row"
              role="row"
              style={{ top: (first + i) * rowHeight, height: rowHeight, width: totalWidth }}
            >
              {columns.map((c) => (
                <div key={c.id} className="vtable-cell" style={{ width: c.width }}>
                  {c.cell(row)}
                </div>
              ))}
            </div>
          ))}
          {pending.map((i) => (
            <div
              key={`pending-${i}`}
              className="vtable-row pending"
              role="row"
              aria-busy="true"
              style={{ top: i * rowHeight, height: rowHeight, width: totalWidth }}
            >
              <div className="vtable-cell muted" style={{ width: totalWidth }}>
                loading…
              </div>
            </div>
          ))}
        </div>
      </div>
    </div>
  );
}

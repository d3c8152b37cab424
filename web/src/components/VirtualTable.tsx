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
export function VirtualTable<T>({
  rows,
  columns,
  rowKey,
  rowHeight = 28,
  height = 560,
  testId,
}: {
  rows: T[];
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
  const last = Math.min(rows.length, Math.ceil((scrollTop + height) / rowHeight) + overscan);
  const totalWidth = columns.reduce((w, c) => w + c.width, 0);
  const visible = rows.slice(first, last);
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
        <div style={{ height: rows.length * rowHeight, width: totalWidth, position: 'relative' }}>
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
        </div>
      </div>
    </div>
  );
}

import type { ReactNode } from 'react';
import type { Loaded } from '../util';

// Renders a loaded value, or the loading note, or the error (with the server's message).
export function Show<T>({ loaded, children }: { loaded: Loaded<T>; children: (v: T) => ReactNode }) {
  if (loaded.state === 'loading') return <p className="muted" data-testid="loading">Loading…</p>;
  if (loaded.state === 'error') return <p className="error" role="alert">{loaded.error}</p>;
  return <>{children(loaded.value)}</>;
}

export function KeyValueTable({ rows, empty, testId }: { rows: [string, ReactNode][]; empty: string; testId?: string }) {
  if (rows.length === 0) return <p className="muted">{empty}</p>;
  return (
    <table className="kv" data-testid={testId}>
      <tbody>
        {rows.map(([k, v]) => (
          <tr key={k}>
            <th>{k}</th>
            <td>{v}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

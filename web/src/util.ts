import { useEffect, useState } from 'react';
import { ApiError } from './api';

export function formatTime(ms?: number): string {
  if (!ms) return '';
  const d = new Date(ms);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, '');
}

export function formatNumber(v: number | string | undefined): string {
  if (v === undefined) return '';
  if (typeof v === 'string') return v;
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 1e-3 && Math.abs(v) < 1e6 ? v.toPrecision(6).replace(/0+$/, '') : v.toExponential(4);
}

export type Loaded<T> = { state: 'loading' } | { state: 'error'; error: string } | { state: 'ok'; value: T };

// Runs `load` when `deps` change; the result, its error message, or loading.
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [result, setResult] = useState<Loaded<T>>({ state: 'loading' });
  useEffect(() => {
    let live = true;
    setResult({ state: 'loading' });
    load().then(
      (value) => live && setResult({ state: 'ok', value }),
      (e: unknown) => live && setResult({ state: 'error', error: errorMessage(e) }),
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return result;
}

export function errorMessage(e: unknown): string {
  if (e instanceof ApiError) return e.status ? `${e.message} (HTTP ${e.status})` : e.message;
  return String(e);
}

import { useEffect, useRef, useState } from 'react';
import uPlot from 'uplot';
import { chartBuckets, downsampleRuns, metricNumber, type Downsampled } from '../api';
import { takePrefetchedChart } from '../prefetch';
import { errorMessage } from '../util';

export interface ChartSeries {
  runId: string;
  label: string;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#7f7f7f', '#bcbd22', '#17becf'];

// One metric of one or more runs, drawn by uPlot on a canvas. The server downsamples each
// history to about one point per pixel, keeping every bucket's min and max (no peak or dip is
// lost), all the chart's runs in one request; dragging across the chart zooms, which fetches
// that step range anew — exact points once the range holds few enough. Reset zoom goes back
// to the whole history.
export function MetricChart({ metricKey, series, height = 240 }: {
  metricKey: string;
  series: ChartSeries[];
  height?: number;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plotRef = useRef<uPlot | null>(null);
  const [width, setWidth] = useState(0);
  const [range, setRange] = useState<[number, number] | null>(null);
  const [logY, setLogY] = useState(false);
  const [xMode, setXMode] = useState<XMode>('step');
  const [smoothing, setSmoothing] = useState(0);
  // What the zoom hook (made once per plot) needs to map a selection back to steps.
  const view = useRef<{ data: Downsampled[]; xMode: XMode }>({ data: [], xMode: 'step' });
  const plotShape = useRef('');
  const origins = useRef<Origins>(new Map());
  const [result, setResult] = useState<{ data: Downsampled[] } | { error: string } | null>(null);

  // The width decides the buckets; watch it (charts live in resizable layouts).
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    setWidth(el.clientWidth);
    const observer = new ResizeObserver(() => setWidth(el.clientWidth));
    observer.observe(el);
    return () => observer.disconnect();
  }, []);

  const runKey = series.map((s) => s.runId).join(',');
  const buckets = width ? chartBuckets(width) : 0; // changes only on real resizes
  useEffect(() => {
    if (!width) return;
    let live = true;
    // All the runs in one request; the whole range's may have left with the entry module.
    const runIds = series.map((s) => s.runId);
    const answer = (!range && takePrefetchedChart(runIds, metricKey, buckets)) ||
      downsampleRuns(runIds, metricKey, buckets, range?.[0], range?.[1]);
    answer
      .then((data) => {
        if (!live) return;
        if (!range) {
          for (const d of data) {
            if (d.timestamps.length) origins.current.set(d.run_id, d.timestamps.reduce((a, b) => Math.min(a, b)));
          }
        }
        setResult({ data });
      })
      .catch((e) => live && setResult({ error: errorMessage(e) }));
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [runKey, metricKey, range, buckets]);

  // (Re)draw: a new plot when its shape changes (runs, log axis), else new data in place.
  useEffect(() => {
    const el = box.current;
    if (!el || !result || 'error' in result || !width) return;
    const aligned = alignSeries(result.data, xMode, origins.current, smoothing);
    view.current = { data: result.data, xMode };
    let plot = plotRef.current;
    const shape = `${result.data.length}|${logY}|${xMode}`;
    if (plot && plotShape.current !== shape) {
      plot.destroy();
      plot = null;
    }
    plotShape.current = shape;
    if (!plot) {
      const opts: uPlot.Options = {
        width,
        height,
        scales: { x: { time: xMode === 'wall' }, y: logY ? { distr: 3 } : {} },
        axes: [{ label: X_LABELS[xMode] }, { label: metricKey, size: 60 }],
        cursor: { drag: { x: true, y: false, setScale: false } },
        series: [
          { label: X_LABELS[xMode] },
          ...series.map((s, i) => ({
            label: s.label,
            stroke: PALETTE[i % PALETTE.length],
            width: 1.5,
            spanGaps: true,
            points: { show: false },
          })),
        ],
        hooks: {
          setSelect: [
            (u: uPlot) => {
              if (u.select.width < 3) return;
              const x0 = u.posToVal(u.select.left, 'x');
              const x1 = u.posToVal(u.select.left + u.select.width, 'x');
              u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
              const steps = stepsWithin(view.current.data, view.current.xMode, origins.current, x0, x1);
              if (steps) setRange(steps);
            },
          ],
        },
      };
      plotRef.current = new uPlot(opts, aligned, el.querySelector('.chart-canvas') as HTMLElement);
    } else {
      plot.setData(aligned);
      if (plot.width !== width) plot.setSize({ width, height });
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [result, logY, width, xMode, smoothing]);

  useEffect(() => () => plotRef.current?.destroy(), []);

  const ok = result && !('error' in result) ? result.data : null;
  const exact = ok ? ok.every((d) => d.exact) : false;
  const total = ok ? ok.reduce((n, d) => n + d.total_points, 0) : 0;
  const shown = ok ? ok.reduce((n, d) => n + d.steps.length, 0) : 0;
  return (
    <div
      className="chart"
      ref={box}
      data-testid="metric-chart"
      data-metric={metricKey}
      data-exact={ok ? String(exact) : undefined}
      data-range={range ? `${range[0]}-${range[1]}` : 'all'}
      data-series={series.length}
      data-loaded-runs={ok ? ok.filter((d) => d.steps.length > 0).map((d) => d.run_id).join(',') : undefined}
    >
      <div className="chart-head">
        <strong>{metricKey}</strong>
        <span className="muted" data-testid="chart-status">
          {result === null
            ? 'loading…'
            : 'error' in result
              ? ''
              : exact
                ? `${shown} points, exact`
                : `${total} points → ${shown} shown (min/max per bucket)`}
          {range ? ` · steps ${range[0]}–${range[1]}` : ''}
        </span>
        <label>
          <input type="checkbox" checked={logY} onChange={(e) => setLogY(e.target.checked)} /> log y
        </label>
        <label>
          x{' '}
          <select value={xMode} onChange={(e) => setXMode(e.target.value as XMode)} aria-label="x axis">
            <option value="step">step</option>
            <option value="relative">relative time</option>
            <option value="wall">wall time</option>
          </select>
        </label>
        <label>
          smoothing{' '}
          <select value={smoothing} onChange={(e) => setSmoothing(Number(e.target.value))} aria-label="smoothing">
            {[0, 0.6, 0.8, 0.9, 0.95, 0.99].map((w) => (
              <option key={w} value={w}>
                {w === 0 ? 'none' : w}
              </option>
            ))}
          </select>
        </label>
        {range ? (
          <button type="button" onClick={() => setRange(null)}>
            Reset zoom
          </button>
        ) : null}
      </div>
      {result && 'error' in result ? <p className="error" role="alert">{result.error}</p> : null}
      <div className="chart-canvas" />
    </div>
  );
}

type XMode = 'step' | 'relative' | 'wall';
const X_LABELS: Record<XMode, string> = { step: 'step', relative: 'seconds since start', wall: 'time' };

// A point's x: its step, seconds since the run's first point, or its wall time (seconds).
// `origins`: each run's first timestamp (from the whole history, so zooming keeps the axis).
type Origins = Map<string, number>;
function xOf(d: Downsampled, i: number, mode: XMode, origins: Origins): number {
  if (mode === 'step') return d.steps[i];
  if (mode === 'wall') return d.timestamps[i] / 1000;
  return (d.timestamps[i] - (origins.get(d.run_id) ?? d.timestamps[0] ?? 0)) / 1000;
}

// The step range of the points whose x lies in [x0, x1], over all runs (a zoom in any x mode
// becomes a step range for the server); null when it holds no two distinct steps.
function stepsWithin(data: Downsampled[], mode: XMode, origins: Origins, x0: number, x1: number): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const d of data) {
    for (let i = 0; i < d.steps.length; i++) {
      const x = xOf(d, i, mode, origins);
      if (x < x0 || x > x1) continue;
      lo = Math.min(lo, d.steps[i]);
      hi = Math.max(hi, d.steps[i]);
    }
  }
  if (mode === 'step') {
    lo = Math.min(lo, Math.ceil(x0));
    hi = Math.max(hi, Math.floor(x1));
  }
  return Number.isFinite(lo) && Number.isFinite(hi) && hi > lo ? [lo, hi] : null;
}

// uPlot wants one ascending x array shared by all series: the union of the runs' x values,
// with a gap (null) where a run has no point there. One value per x and run (the last).
// `smoothing` w > 0 draws an exponential moving average (s = w*s + (1-w)*v) of each run.
function alignSeries(data: Downsampled[], mode: XMode, origins: Origins, smoothing: number): uPlot.AlignedData {
  const xs = new Set<number>();
  const byRun = data.map((d) => {
    const m = new Map<number, number | null>();
    let s: number | null = null;
    d.steps.forEach((_, i) => {
      const x = xOf(d, i, mode, origins);
      let v = metricNumber(d.values[i]);
      if (smoothing > 0 && v !== null) {
        s = s === null ? v : smoothing * s + (1 - smoothing) * v;
        v = s;
      }
      m.set(x, v);
      xs.add(x);
    });
    return m;
  });
  const sorted = Float64Array.from(xs).sort();
  const ys = byRun.map((m) => Array.from(sorted, (x) => (m.has(x) ? m.get(x)! : null)));
  return [Array.from(sorted), ...ys] as uPlot.AlignedData;
}

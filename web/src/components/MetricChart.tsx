import { useEffect, useRef, useState } from 'react';
import uPlot from 'uplot';
import { downsample, metricNumber, type Downsampled } from '../api';
import { errorMessage } from '../util';

export interface ChartSeries {
  runId: string;
  label: string;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2',
  '#7f7f7f', '#bcbd22', '#17becf'];

// One metric of one or more runs, drawn by uPlot on a canvas. The server downsamples each
// history to about one point per pixel, keeping every bucket's min and max (no peak or dip is
// lost); dragging across the chart zooms, which fetches that step range anew — exact points
// once the range holds few enough. Reset zoom goes back to the whole history.
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
  const bucketWidth = Math.max(100, Math.round(width / 100) * 100); // refetch only on real resizes
  useEffect(() => {
    if (!width) return;
    let live = true;
    const buckets = Math.min(10000, Math.max(50, Math.ceil(bucketWidth / 2)));
    Promise.all(series.map((s) => downsample(s.runId, metricKey, buckets, range?.[0], range?.[1])))
      .then((data) => live && setResult({ data }))
      .catch((e) => live && setResult({ error: errorMessage(e) }));
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [runKey, metricKey, range, bucketWidth]);

  // (Re)draw: a new plot when its shape changes (runs, log axis), else new data in place.
  useEffect(() => {
    const el = box.current;
    if (!el || !result || 'error' in result || !width) return;
    const aligned = alignSeries(result.data);
    let plot = plotRef.current;
    const seriesCount = result.data.length + 1;
    if (plot && (plot.series.length !== seriesCount || (plot.scales.y.distr === 3) !== logY)) {
      plot.destroy();
      plot = null;
    }
    if (!plot) {
      const opts: uPlot.Options = {
        width,
        height,
        scales: { x: { time: false }, y: logY ? { distr: 3 } : {} },
        axes: [{ label: 'step' }, { label: metricKey, size: 60 }],
        cursor: { drag: { x: true, y: false, setScale: false } },
        series: [
          { label: 'step' },
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
              const lo = Math.floor(u.posToVal(u.select.left, 'x'));
              const hi = Math.ceil(u.posToVal(u.select.left + u.select.width, 'x'));
              u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
              if (hi > lo) setRange([lo, hi]);
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
  }, [result, logY, width]);

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

// uPlot wants one ascending x array shared by all series: the union of the runs' steps,
// with a gap (null) where a run has no point at a step. One value per step and run (the last).
function alignSeries(data: Downsampled[]): uPlot.AlignedData {
  const steps = new Set<number>();
  const byRun = data.map((d) => {
    const m = new Map<number, number | null>();
    d.steps.forEach((s, i) => {
      m.set(s, metricNumber(d.values[i]));
      steps.add(s);
    });
    return m;
  });
  const xs = Float64Array.from(steps).sort();
  const ys = byRun.map((m) => Array.from(xs, (x) => (m.has(x) ? m.get(x)! : null)));
  return [Array.from(xs), ...ys] as uPlot.AlignedData;
}

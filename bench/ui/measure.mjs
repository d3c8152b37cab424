// One timed page load for bench/ui/run.py, in the Chromium it started (over CDP), in a fresh
// browser context (empty cache). UI_BENCH is a JSON object: {cdp, ui: "trainyard"|"mlflow",
// page: "table"|"chart"|"long", url, token, ...the seeded ids}. Prints one JSON line of
// milliseconds since navigation started (performance.now() in the page, so node's own
// overhead is not counted); exits non-zero with a screenshot path when a page never got there.
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';

// playwright-core is the web app's dev dependency (web/node_modules, installed by scripts/build).
const { chromium } = createRequire(new URL('../../web/package.json', import.meta.url))('playwright-core');

const c = JSON.parse(process.env.UI_BENCH ?? '{}');
const base = c.url.replace(/\/$/, '');
const TIMEOUT = Number(c.timeout_ms ?? 300000);

// Waits until fn(arg) holds in the page. The predicates end in `&& performance.now()`, so the
// time is the page's at the animation frame in which it saw the condition hold, without the
// round trip back to node (which a loaded machine can stretch by 100 ms and more).
async function until(page, fn, arg, what) {
  let handle;
  try {
    handle = await page.waitForFunction(fn, arg, { timeout: TIMEOUT, polling: 'raf' });
  } catch (e) {
    throw new Error(`${c.ui} ${c.page}: timed out waiting for ${what}: ${e.message}`);
  }
  const t = await handle.jsonValue();
  return typeof t === 'number' || typeof t === 'string' ? t : page.evaluate(() => performance.now());
}

// Trainyard: the token goes in sessionStorage before the app starts, as the login page does.
async function signIn(context) {
  if (c.ui !== 'trainyard') return;
  await context.addInitScript((token) => sessionStorage.setItem('trainyard.token', token), c.token);
}

const pages = {
  trainyard: {
    async table(page) {
      await page.goto(`${base}/#/experiments/${c.table_experiment}`);
      const rows = await until(page, () => document.querySelectorAll('[data-testid=runs-table] .vtable-row').length > 0 && performance.now(),
        null, 'the first rows');
      const t0 = await page.evaluate(() => performance.now());
      await page.locator('[data-column="metric:acc"]').click();
      const sorted = await until(page, (top) => document.querySelector('.vtable-row')?.textContent?.includes(top) && performance.now(),
        c.top_run, `${c.top_run} first after sorting by acc`);
      return { rows_visible_ms: rows, sort_click_ms: sorted - t0, total_ms: sorted };
    },
    async chart(page) {
      await page.goto(`${base}/#/experiments/${c.chart_experiment}/compare?runs=${c.chart_runs.join(',')}`);
      const drawn = await until(page, (n) => {
        const el = document.querySelector('[data-testid=metric-chart][data-metric="loss"]');
        return el && el.dataset.exact !== undefined && el.dataset.series === String(n) && el.querySelector('canvas') && performance.now();
      }, c.chart_runs.length, 'the loss chart with every run');
      return { total_ms: drawn };
    },
    async long(page) {
      await page.goto(`${base}/#/experiments/${c.long_experiment}/runs/${c.long_run}`);
      const drawn = await until(page, () => {
        const el = document.querySelector('[data-testid=metric-chart][data-metric="loss"]');
        return el && el.dataset.exact !== undefined && el.querySelector('canvas') && performance.now();
      }, null, 'the loss chart');
      return { total_ms: drawn };
    },
  },
  mlflow: {
    // MLflow's runs table (ag-grid) shows a first page of runs; choosing acc in its Sort menu
    // re-queries runs/search with order_by, so "answered" is the same: an end of the acc order
    // is the first row.
    async table(page) {
      await page.goto(`${base}/#/experiments/${c.table_experiment}/runs`);
      const rows = await until(page, () => [...document.querySelectorAll('.ag-row')].some((r) => /run-\d{5}/.test(r.textContent)) && performance.now(),
        null, 'the first rows');
      const t0 = await page.evaluate(() => performance.now());
      // MLflow 3 shows no metric columns by default: its Sort menu is how one sorts by acc.
      await page.getByRole('button', { name: /^Sort:/ }).click();
      await page.getByText('acc', { exact: true }).first().click();
      // The first click may sort either way; either end of the acc order answers it.
      const sorted = await until(page, ([top, bottom]) => [...document.querySelectorAll('.ag-row[row-index="0"]')]
        .some((r) => r.textContent.includes(top) || r.textContent.includes(bottom)) && performance.now(),
        [c.top_run, c.bottom_run], `${c.top_run} or ${c.bottom_run} first after sorting by acc`);
      return { rows_visible_ms: rows, sort_click_ms: sorted - t0, total_ms: sorted };
    },
    // MLflow's metric page: the full history of each run (metrics/get-history), one Plotly plot.
    async chart(page) {
      return metricPage(page, c.chart_runs, c.chart_experiment, c.chart_points);
    },
    async long(page) {
      return metricPage(page, [c.long_run], c.long_experiment, c.long_points);
    },
  },
};

async function metricPage(page, runs, experiment, points) {
  const q = `?runs=${JSON.stringify(runs)}&metric=${encodeURIComponent(JSON.stringify('loss'))}` +
    `&experiments=${JSON.stringify([experiment])}&plot_metric_keys=${encodeURIComponent(JSON.stringify(['loss']))}&x_axis=step`;
  await page.goto(`${base}/#/metric${q}`);
  // Drawn: the plot holds a trace for every run (MLflow 3's metric page fetches a sample of
  // each history, metrics/get-history-bulk-interval, 320 points per run, and adds a second
  // trace per run for smoothing).
  const drawn = await until(page, ([n]) => {
    const el = document.querySelector('.js-plotly-plot');
    if (!el || !el.data || el.data.length < n || !el._fullLayout || !el.querySelector('.main-svg')) return false;
    return el.data.every((d) => (d.x?.length ?? 0) > 0) && performance.now();
  }, [runs.length, points], `the plot of ${runs.length} runs x ${points} points`).catch(async (e) => {
    const seen = await page.evaluate(() => {
      const el = document.querySelector('.js-plotly-plot');
      return el ? JSON.stringify((el.data ?? []).map((d) => [d.type, d.x?.length])) : 'no .js-plotly-plot';
    });
    throw new Error(`${e.message}\n(traces: ${seen})`);
  });
  const pointsPerTrace = await page.evaluate(() => Math.max(...document.querySelector('.js-plotly-plot').data.map((d) => d.x.length)));
  return { total_ms: drawn, points_per_run: pointsPerTrace };
}

// --pages every: each page of our UI, by its route and what "ready" means there: the page's
// main parts are on screen (`need`: selectors that must match, with a minimum count of
// matches), nothing in it still says it is loading (a section's "Loading…", a chart without
// its data), and any extra condition holds (`also`). An error shown on the page ends the wait.
const q = encodeURIComponent;
const everyPages = {
  experiments: () => ({ url: '#/experiments', need: [['[data-testid=experiments-table] tbody tr', 4]] }),
  runs: () => ({ url: `#/experiments/${c.table_experiment}`, need: [['[data-testid=runs-table] .vtable-row', 1]] }),
  run: () => ({
    url: `#/experiments/${c.table_experiment}/runs/${c.detail_run}`,
    need: [['[data-testid=run-params] tr', 5], ['[data-testid=run-metrics] tr', 8], ['[data-testid=artifacts] .artifact-list', 1]],
  }),
  compare: () => ({
    url: `#/experiments/${c.table_experiment}/compare?runs=${c.compare_runs.join(',')}`,
    need: [['[data-testid=metric-chart] canvas', 1]],
  }),
  jobs: () => ({ url: '#/jobs', need: [['[data-testid=jobs-table] tbody tr', 11], ['[data-testid=cluster-table]', 1]] }),
  job: () => ({
    url: `#/jobs/${q(c.job)}`,
    need: [['[data-testid=attempts-table] tbody tr', 2], ['[data-testid=checkpoints-table] tbody tr', 12]],
    also: 'log',
  }),
  models: () => ({ url: '#/models', need: [['[data-testid=models-table] tbody tr', 5]] }),
  model: () => ({ url: `#/models/${q(c.model)}`, need: [['[data-testid=model-versions] tbody tr', 5], ['form[aria-label="move alias"] button:not([disabled])', 1]] }),
  'model-version': () => ({ url: `#/models/${q(c.model)}/versions/${c.model_version}`, need: [['[data-testid=model-version] tr', 6]] }),
  catalogs: () => ({ url: '#/catalog', need: [['[data-testid=catalogs-table] tbody tr', 1]] }),
  catalog: () => ({ url: `#/catalog/${q(c.catalog)}`, need: [['[data-testid=schemas-table] tbody tr', 1]] }),
  schema: () => ({ url: `#/catalog/${q(c.catalog)}/${q(c.schema)}`, need: [['[data-testid=tables-table] tbody tr', 4]] }),
  table: () => ({
    url: `#/catalog/${c.uc_table.split('.').map(q).join('/')}`,
    need: [['[data-testid=table-columns] tbody tr', 3], ['[data-testid=table-preview] tbody tr', 1],
      ['[data-testid=table-history] tbody tr', 3], ['form[aria-label="change grants"] button:not([disabled])', 1]],
  }),
  lineage: () => ({ url: `#/lineage?object=${q(c.lineage_object)}`, need: [['[data-testid=lineage-node]', 3]] }),
  endpoints: () => ({ url: '#/endpoints', need: [['[data-testid=endpoints-table] tbody tr', 1]] }),
  endpoint: () => ({
    url: `#/endpoints/${q(c.endpoint)}`,
    need: [['[data-testid=endpoint-detail]', 1], ['[data-testid=served-entities] tbody tr', 2], ['[data-testid=no-requests], [data-testid=request-samples]', 1]],
  }),
};

async function everyPage(page, name) {
  const spec = everyPages[name]();
  await page.goto(`${base}/${spec.url}`);
  const ready = await until(page, ({ need, also }) => {
    const main = document.querySelector('main');
    if (!main) return false;
    const error = main.querySelector('.error, [role=alert]');
    if (error) return `error: ${error.textContent}`;
    for (const [sel, n] of need) if (main.querySelectorAll(sel).length < n) return false;
    if (main.querySelector('[data-testid=loading]')) return false;
    // Every chart on screen holds its data and is drawn.
    for (const el of main.querySelectorAll('[data-testid=metric-chart]')) {
      if (el.dataset.exact === undefined || !el.querySelector('canvas')) return false;
    }
    if (also === 'log') {
      const log = main.querySelector('[data-testid=log-text]')?.textContent ?? '';
      if (!log || log === '(no output yet)') return false;
    }
    return performance.now();
  }, spec, `page ${name} ready (${spec.need.map(([s, n]) => `${n} x ${s}`).join(', ')})`);
  if (typeof ready === 'string') throw new Error(`${name}: the page shows ${ready}`);
  return { total_ms: ready };
}

const browser = await chromium.connectOverCDP(c.cdp);
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
await signIn(context);
const page = await context.newPage();
try {
  const result = c.page.startsWith('page:') ? await everyPage(page, c.page.slice(5)) : await pages[c.ui][c.page](page);
  for (const k of Object.keys(result)) result[k] = Math.round(result[k]);
  console.log(JSON.stringify(result));
} catch (e) {
  const shot = path.join(tmpdir(), `bench-ui-${c.ui}-${c.page.replace(':', '-')}.png`);
  await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
  console.error(`${e.message}\n(screenshot: ${shot})`);
  process.exitCode = 1;
} finally {
  await context.close();
  await browser.close();
}

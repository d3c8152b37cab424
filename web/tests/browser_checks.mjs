// Browser checks of the web UI, run by tests/test_web_ui.py: one scenario per run, in a
// headless Chromium the test session started once (connected over CDP). The page may reach
// only the Trainyard server under test; every other request is aborted.
//
// Usage: node browser_checks.mjs <scenario>, with TRAINYARD_UI_TEST set to a JSON object:
// {cdp, url, token, screenshot_dir, ...scenario data}. Exits non-zero with the failure (and
// a screenshot in screenshot_dir) when the UI does not show what it should.
import { chromium } from 'playwright-core';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const config = JSON.parse(process.env.TRAINYARD_UI_TEST ?? '{}');
const scenario = process.argv[2];
const base = config.url.replace(/\/$/, '');
const TIMEOUT = 15000;

function check(cond, message) {
  if (!cond) throw new Error(message);
}

async function text(locator) {
  return (await locator.textContent({ timeout: TIMEOUT })) ?? '';
}

// Waits until fn() is true (polling, with a deadline), else fails with `what`.
async function until(fn, what, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what} (last: ${String(last)})`);
}

async function signIn(page, token = config.token) {
  await page.goto(`${base}/`);
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('current-user').waitFor({ timeout: TIMEOUT });
}

async function runsCount(page) {
  return Number((await text(page.getByTestId('runs-count'))).split(' ')[0]);
}

const scenarios = {
  // The login page, a refused token's message, and the experiments list after signing in.
  async login(page, responses) {
    const index = await page.goto(`${base}/`);
    const csp = index.headers()['content-security-policy'] ?? '';
    check(csp.includes("script-src 'self'"), `index.html CSP: ${csp}`);
    await page.getByLabel('API token').fill('not-a-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const error = await text(page.getByTestId('login-error'));
    check(error.includes('401'), `the refused token's message: ${error}`);
    await page.getByLabel('API token').fill(config.token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const user = await text(page.getByTestId('current-user'));
    check(user.includes('admin'), `current user: ${user}`);
    const table = page.getByTestId('experiments-table');
    await table.getByRole('link', { name: config.experiment_name }).waitFor({ timeout: TIMEOUT });
    // The token lives in sessionStorage: a reload stays signed in.
    await page.reload();
    await page.getByTestId('current-user').waitFor({ timeout: TIMEOUT });
    check(responses.some((r) => r.url().includes('/assets/')), 'no asset was loaded');
  },

  // The runs table: all runs, virtualized rows, MLflow filters, sorting, the column chooser.
  async runs(page) {
    await signIn(page);
    await page.getByTestId('experiments-table').getByRole('link', { name: config.experiment_name }).click();
    await until(async () => (await runsCount(page)) === config.total_runs, `${config.total_runs} runs`);
    const domRows = await page.locator('[data-testid=runs-table] .vtable-row').count();
    check(domRows > 0 && domRows < config.total_runs, `virtualized rows: ${domRows} of ${config.total_runs} in the DOM`);
    // Scrolling to the end renders the last rows.
    await page.locator('.vtable-scroll').evaluate((el) => el.scrollTo(0, el.scrollHeight));
    await until(async () => (await page.locator('.vtable-row').last().textContent())?.length, 'rows after scrolling');

    await page.getByTestId('runs-filter').fill(config.filter);
    await page.getByTestId('runs-filter').press('Enter');
    await until(async () => (await runsCount(page)) === config.filtered_runs,
      `${config.filtered_runs} runs for ${config.filter}`);

    const header = page.locator(`[data-column="metric:${config.sort_metric}"]`);
    await header.click();
    await until(async () => (await header.getAttribute('aria-sort')) === 'descending', 'descending sort');
    await until(async () => (await text(page.locator('.vtable-row').first())).includes(config.filtered_max_run),
      `${config.filtered_max_run} first when sorted descending`);
    await header.click();
    await until(async () => (await text(page.locator('.vtable-row').first())).includes(config.filtered_min_run),
      `${config.filtered_min_run} first when sorted ascending`);

    await page.getByRole('button', { name: 'Columns' }).click();
    const paramHeader = page.locator(`[data-column="param:${config.hidden_param}"]`);
    check((await paramHeader.count()) === 1, `the ${config.hidden_param} column is shown at first`);
    await page.getByTestId('column-chooser').getByLabel(config.hidden_param, { exact: true }).uncheck();
    await until(async () => (await paramHeader.count()) === 0, `the ${config.hidden_param} column hidden`);

    await page.getByTestId('runs-filter').fill('metrics.loss <<< 1');
    await page.getByTestId('runs-filter').press('Enter');
    const alert = await text(page.getByRole('alert'));
    check(alert.includes('400'), `a bad filter's error: ${alert}`);
  },

  // Two runs' charts side by side, downsampled; dragging zooms and fetches exact points.
  async chart(page) {
    await signIn(page);
    await page.goto(`${base}/#/experiments/${config.chart_experiment_id}`);
    for (const name of config.chart_runs) {
      await page.getByLabel(`select ${name}`, { exact: true }).check();
    }
    const histories = [];
    page.on('request', (r) => {
      if (r.url().includes('/metrics/downsample')) histories.push(new URL(r.url()));
    });
    await page.getByTestId('compare-link').click();
    const chart = page.locator(`[data-testid=metric-chart][data-metric="${config.chart_metric}"]`);
    await chart.waitFor({ timeout: TIMEOUT });
    check((await chart.getAttribute('data-series')) === String(config.chart_runs.length), 'both runs in the chart');
    await until(async () => (await chart.getAttribute('data-exact')) === 'false', 'a downsampled chart');
    // The chart holds every selected run's series, all asked for in one request.
    const loaded = (await chart.getAttribute('data-loaded-runs')).split(',');
    check(JSON.stringify([...loaded].sort()) === JSON.stringify([...config.curve_run_ids].sort()),
      `the chart holds the series of runs ${loaded}, not of ${config.curve_run_ids}`);
    const asked = histories.map((u) => `${u.pathname} ${u.searchParams.getAll('run_ids').sort()}`);
    check(asked.length === 1 && asked[0] === `/api/trainyard/v1/metrics/downsample-bulk ${[...config.curve_run_ids].sort()}`,
      `the chart's histories: one request for both runs, not ${JSON.stringify(asked)}`);
    const status = await text(chart.getByTestId('chart-status'));
    check(status.includes(`${config.chart_points} points`), `chart status: ${status}`);
    check((await chart.locator('canvas').count()) === 1, 'one canvas');
    const legend = await text(chart.locator('.u-legend'));
    for (const name of config.chart_runs) check(legend.includes(name), `legend lists ${name}: ${legend}`);

    const over = chart.locator('.u-over');
    const box = await over.boundingBox();
    check(box && box.width > 100, 'the plot area has a size');
    const y = box.y + box.height / 2;
    await page.mouse.move(box.x + box.width * 0.40, y);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.41, y, { steps: 5 });
    await page.mouse.up();
    await until(async () => (await chart.getAttribute('data-range')) !== 'all', 'a zoomed range');
    await until(async () => (await chart.getAttribute('data-exact')) === 'true', 'exact points after zooming');
    const [lo, hi] = (await chart.getAttribute('data-range')).split('-').map(Number);
    check(hi - lo < config.chart_points / 10, `zoomed range ${lo}-${hi}`);
    await chart.getByRole('button', { name: 'Reset zoom' }).click();
    await until(async () => (await chart.getAttribute('data-range')) === 'all', 'zoom reset');

    // Smoothed, on a relative-time axis, a zoom still becomes a step range.
    await chart.getByLabel('smoothing').selectOption('0.9');
    await chart.getByLabel('x axis').selectOption('relative');
    await until(async () => (await text(chart)).includes('seconds since start'), 'the relative-time axis');
    const box2 = await chart.locator('.u-over').boundingBox();
    await page.mouse.move(box2.x + box2.width * 0.60, y);
    await page.mouse.down();
    await page.mouse.move(box2.x + box2.width * 0.61, y, { steps: 5 });
    await page.mouse.up();
    await until(async () => (await chart.getAttribute('data-exact')) === 'true', 'exact points after a time zoom');
    const [lo2, hi2] = (await chart.getAttribute('data-range')).split('-').map(Number);
    check(lo2 > config.chart_points / 4 && hi2 - lo2 < config.chart_points / 10, `time zoom became steps ${lo2}-${hi2}`);
  },

  // The link the mlflow client printed opens the run; before signing in it waits at the login.
  async mlflow_link(page) {
    await page.goto(config.run_link);
    await page.getByLabel('API token').fill(config.token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const detail = page.getByTestId('run-detail');
    await detail.waitFor({ timeout: TIMEOUT });
    check((await detail.getAttribute('data-run-id')) === config.link_run_id, 'the linked run');
    const params = await text(page.getByTestId('run-params'));
    check(params.includes(config.link_param), `params: ${params}`);
    const metrics = await text(page.getByTestId('run-metrics'));
    check(metrics.includes(config.link_metric), `metrics: ${metrics}`);
    await page.locator(`[data-testid=metric-chart][data-metric="${config.link_metric}"] canvas`).waitFor({ timeout: TIMEOUT });

    // Its artifacts: browse into a folder, preview text, JSON and an image.
    const artifacts = page.getByTestId('artifacts');
    await artifacts.getByRole('button', { name: 'config.json' }).click();
    await until(async () => (await text(page.getByTestId('artifact-preview'))).includes('"layers": ['), 'the JSON preview');
    await artifacts.getByRole('button', { name: 'notes/' }).click();
    await artifacts.getByRole('button', { name: 'readme.txt' }).click();
    await until(async () => (await text(page.getByTestId('artifact-preview'))).includes('hello artifact'), 'the text preview');
    await artifacts.getByRole('button', { name: 'artifacts', exact: true }).click();
    await artifacts.getByRole('button', { name: 'pixel.png' }).click();
    const img = page.getByTestId('artifact-preview').locator('img');
    await until(async () => (await img.evaluate((el) => el.complete && el.naturalWidth)) === 1, 'the image preview');
  },

  // The jobs queue and a job's attempts; the registry's models, aliases and a version.
  async jobs_and_models(page) {
    await signIn(page);
    await page.getByRole('link', { name: 'Jobs', exact: true }).click();
    const jobs = page.getByTestId('jobs-table');
    await page.getByTestId('cluster-table').waitFor({ timeout: TIMEOUT });
    await jobs.getByRole('link', { name: config.job_id }).click();
    const job = page.getByTestId('job-detail');
    await job.waitFor({ timeout: TIMEOUT });
    check((await text(job)).includes(config.job_name), 'the job page names the job');
    await until(async () => {
      await page.reload();
      await page.getByTestId('job-detail').waitFor({ timeout: TIMEOUT });
      return (await page.getByTestId('attempts-table').count()) === 1;
    }, "the job's attempts");
    await until(async () => (await text(page.getByTestId('log-text'))).includes('hello-from-the-ui-job'),
      "the job's log");

    await page.getByRole('link', { name: 'Models', exact: true }).click();
    await page.getByTestId('models-table').getByRole('link', { name: config.model_name }).click();
    const aliases = await text(page.getByTestId('model-aliases'));
    check(aliases.includes(`@${config.model_alias}`), `aliases: ${aliases}`);
    await page.getByTestId('model-versions').getByRole('link', { name: '1', exact: true }).click();
    const version = await text(page.getByTestId('model-version'));
    check(version.includes(config.model_alias), `version page: ${version}`);
    // Its source run is a link to the run's page.
    const source = page.getByTestId('source-run-link');
    const runHref = `#/experiments/${config.chart_experiment_id}/runs/${config.curve_run_ids[0]}`;
    await until(async () => (await source.getAttribute('href')) === runHref, `the source run linked to ${runHref}`);
    await source.click();
    await until(async () => (await page.getByTestId('run-detail').getAttribute('data-run-id')) === config.curve_run_ids[0],
      "the source run's page");
    await page.goBack();
    await page.getByTestId('model-version').waitFor({ timeout: TIMEOUT });

    // Move the alias to version 2, through the confirmation.
    await page.getByRole('link', { name: config.model_name, exact: true }).click();
    await page.getByLabel('alias', { exact: true }).fill(config.model_alias);
    await page.getByLabel('version', { exact: true }).selectOption('2');
    await page.getByRole('button', { name: 'Move alias' }).click();
    const confirm = await text(page.getByTestId('alias-confirm'));
    check(confirm.includes('from version 1 to version 2'), `confirmation: ${confirm}`);
    await page.getByRole('button', { name: 'Yes, move it' }).click();
    await until(async () => (await text(page.getByTestId('model-aliases'))).includes('version 2'),
      `@${config.model_alias} on version 2`);

    // Cancel a running job, through the confirmation.
    await page.goto(`${base}/#/jobs/${config.long_job_id}`);
    await until(async () => {
      await page.reload();
      await page.getByTestId('job-state').waitFor({ timeout: TIMEOUT });
      return (await text(page.getByTestId('job-state'))) === 'RUNNING';
    }, 'the long job running', 30000);
    // Its log shows while it runs.
    await until(async () => (await text(page.getByTestId('log-text'))).includes('long-job-started'),
      "the running job's log", 30000);
    await page.getByRole('button', { name: 'Cancel job' }).click();
    await page.getByRole('button', { name: 'Yes, cancel the job' }).click();
    await until(async () => {
      await page.reload();
      await page.getByTestId('job-state').waitFor({ timeout: TIMEOUT });
      return (await text(page.getByTestId('job-state'))) === 'CANCELLED';
    }, 'the job cancelled', 30000);
    check((await page.getByRole('button', { name: 'Cancel job' }).count()) === 0, 'no cancel button on a cancelled job');
  },

  // The catalog browser down to a table: columns, a preview row, history, grants; its lineage
  // graph shows the run that wrote it, and clicking that node opens the run. Then the model
  // version's lineage leads back to its source run.
  async catalog(page) {
    await signIn(page);
    await page.getByRole('link', { name: 'Catalog', exact: true }).click();
    await page.getByTestId('catalogs-table').getByRole('link', { name: config.catalog, exact: true }).click();
    await page.getByTestId('schemas-table').getByRole('link', { name: config.schema, exact: true }).click();
    await page.getByTestId('tables-table').getByRole('link', { name: 'people', exact: true }).click();
    const columns = await text(page.getByTestId('table-columns'));
    for (const c of ['id', 'name', 'email', 'score']) check(columns.includes(c), `column ${c}: ${columns}`);
    check(columns.includes('last4'), `the email mask is listed: ${columns}`);
    await until(async () => (await text(page.getByTestId('table-preview'))).includes(config.preview_name),
      'a preview row');
    const preview = await text(page.getByTestId('table-preview'));
    check(preview.includes(config.masked_email) && !preview.includes(config.raw_email),
      `the mask applies to the preview (to its owner too): ${preview}`);
    const history = await text(page.getByTestId('table-history'));
    check(history.includes('WRITE') || history.includes('CREATE'), `history: ${history}`);
    const users = await page.getByTestId('history-user').allTextContents();
    check(users.length > 0 && users.every((u) => u === config.table_writer), `who made each version: ${users}`);
    await until(async () => (await text(page.getByTestId('table-grants'))).includes(config.reader), 'the grants');
    check(!(await page.getByRole('button', { name: 'Grant', exact: true }).isDisabled()), 'the owner may grant');

    await page.getByTestId('lineage-link').click();
    const run = page.locator(`[data-testid=lineage-node][data-node-type=run][data-node-key="${config.writer_run}"]`);
    await run.waitFor({ timeout: TIMEOUT });
    // A run shows its name; its id stays in the node's tooltip.
    const runLabel = await run.locator('text').last().textContent();
    check(runLabel === config.writer_run_name, `the run node's label is its name: ${runLabel}`);
    const runTip = await run.locator('title').textContent();
    check(runTip.includes(config.writer_run), `the run node's tooltip names its id: ${runTip}`);
    const root = page.locator('[data-testid=lineage-node][data-root=true]');
    check((await root.getAttribute('data-node-type')) === 'table', 'the table is the root');
    const rootBox = await root.boundingBox();
    const runBox = await run.boundingBox();
    check(runBox.x < rootBox.x, 'the writing run is drawn left of (upstream of) the table');
    await run.click();
    const detail = page.getByTestId('run-detail');
    await detail.waitFor({ timeout: TIMEOUT });
    check((await detail.getAttribute('data-run-id')) === config.writer_run, 'the clicked run opened');

    await page.goto(`${base}/#/models/${encodeURIComponent(config.model_name)}/versions/1`);
    await page.getByTestId('lineage-link').click();
    const source = page.locator(`[data-testid=lineage-node][data-node-type=run][data-node-key="${config.curve_run_ids[0]}"]`);
    await source.waitFor({ timeout: TIMEOUT });
    await source.click();
    await until(async () => (await page.getByTestId('run-detail').getAttribute('data-run-id')) === config.curve_run_ids[0],
      "the model version's source run");
  },

  // The endpoints list and an endpoint's page: its 70/30 split, replicas, the request samples.
  async endpoints(page) {
    await signIn(page);
    await page.getByRole('link', { name: 'Endpoints', exact: true }).click();
    const table = page.getByTestId('endpoints-table');
    const row = table.locator('tr', { hasText: config.endpoint });
    await row.waitFor({ timeout: TIMEOUT });
    const rowText = await text(row);
    check(rowText.includes('a 70%') && rowText.includes('b 30%'), `the list's split: ${rowText}`);
    check(rowText.includes('SCALED_TO_ZERO') && rowText.includes('0/0'), `state and replicas: ${rowText}`);
    await table.getByRole('link', { name: config.endpoint }).click();
    const split = page.getByTestId('traffic-split');
    await split.waitFor({ timeout: TIMEOUT });
    const label = await split.getAttribute('aria-label');
    check(label.includes('a 70%') && label.includes('b 30%'), `the split: ${label}`);
    const widths = await split.locator('span').evaluateAll((els) => els.map((e) => e.getBoundingClientRect().width));
    check(widths.length === 2 && Math.abs(widths[0] / (widths[0] + widths[1]) - 0.7) < 0.02, `bar widths ${widths}`);
    const entities = await text(page.getByTestId('served-entities'));
    check(entities.includes(config.model_name) && entities.includes('70%'), `entities: ${entities}`);
    await page.getByTestId('no-requests').waitFor({ timeout: TIMEOUT });
    check(!(await page.getByRole('button', { name: 'Delete endpoint' }).isDisabled()), 'the owner may delete it');
  },

  // A second user who may read but manage nothing: masked rows, and each action disabled
  // with the server's reason.
  async reader(page) {
    await signIn(page, config.reader_token);
    const user = await text(page.getByTestId('current-user'));
    check(user.includes(config.reader) && !user.includes('admin'), `current user: ${user}`);
    await page.goto(`${base}/#/catalog/${config.table.split('.').join('/')}`);
    await until(async () => (await text(page.getByTestId('table-preview'))).includes(config.masked_email),
      'the masked email in the preview');
    check(!(await text(page.getByTestId('table-preview'))).includes(config.raw_email), 'no raw email');
    const grant = page.getByRole('button', { name: 'Grant', exact: true });
    await until(async () => (await grant.isDisabled()) && (await grant.getAttribute('title'))?.includes('MANAGE'),
      'Grant disabled, naming MANAGE');
    check((await text(page.getByTestId('denied-reason'))).includes('MANAGE'), 'the reason is shown');

    await page.goto(`${base}/#/endpoints/${encodeURIComponent(config.endpoint)}`);
    const del = page.getByRole('button', { name: 'Delete endpoint' });
    await until(async () => (await del.isDisabled()) && (await del.getAttribute('title'))?.includes('MANAGE'),
      'Delete endpoint disabled, naming MANAGE');
    const reasons = await page.getByTestId('denied-reason').allTextContents();
    check(reasons.some((r) => r.includes('captured requests')), `the samples' reason: ${reasons}`);

    await page.goto(`${base}/#/jobs/${config.guarded_job_id}`);
    const cancel = page.getByRole('button', { name: 'Cancel job' });
    await until(async () => (await cancel.isDisabled()) && (await cancel.getAttribute('title'))?.includes('EDIT'),
      'Cancel job disabled, naming EDIT');
    check((await text(page.getByTestId('denied-reason'))).includes('EDIT'), 'the reason is shown');

    await page.goto(`${base}/#/models/${encodeURIComponent(config.model_name)}`);
    const move = page.getByRole('button', { name: 'Move alias' });
    await until(async () => (await move.isDisabled()) && (await move.getAttribute('title'))?.includes('EDIT'),
      'Move alias disabled, naming EDIT');
    },

  // A running job's log followed live over server-sent events: a line written after the page
  // opened appears without a reload, and the view says when the attempt is over.
  async follow_log(page, responses) {
    await signIn(page);
    await page.goto(`${base}/#/jobs/${config.follow_job_id}`);
    await until(async () => (await text(page.getByTestId('log-text'))).includes('follow-line-1'),
      "the running job's first line", 30000);
    const stream = page.getByTestId('log-stream');
    check((await stream.getAttribute('data-state')) === 'live', 'the log is followed live');
    check(!(await text(page.getByTestId('log-text'))).includes('follow-line-2'), 'the second line is not written yet');
    // Let the job go on: it writes its second line and ends.
    writeFileSync(config.follow_go_file, 'go');
    await until(async () => (await text(page.getByTestId('log-text'))).includes('follow-line-2'),
      'the line written while the page was open', 30000);
    await until(async () => (await stream.getAttribute('data-state')) === 'ended', 'the stream ended with the job', 30000);
    const urls = responses.map((r) => r.url());
    check(urls.some((u) => u.includes('/logs/stream')), 'the log came over /logs/stream');
    check(!urls.some((u) => /\/logs\?/.test(u)), `no polling of /logs: ${urls.filter((u) => u.includes('/logs')).join(' ')}`);
  },

  // Each page opened by its address (a fresh tab, the token already in sessionStorage): the
  // entry module asks for the page's reads before the page's code has loaded (prefetch.ts),
  // and the page takes those answers rather than asking again.
  async direct_links(page) {
    const enc = encodeURIComponent;
    const [catalog, schema, table] = config.table.split('.');
    const pages = [
      ['#/experiments', 'experiments-table', 'Experiments', ['/experiments/search']],
      [`#/experiments/${config.chart_experiment_id}/runs/${config.curve_run_ids[0]}`, 'run-detail', 'RunDetail',
        [`/runs/get?run_id=${config.curve_run_ids[0]}`, `/artifacts/list?run_id=${config.curve_run_ids[0]}`],
        { charts: [config.curve_run_ids[0]] }],
      [`#/experiments/${config.chart_experiment_id}/compare?runs=${config.curve_run_ids.join(',')}`, 'compare', 'Compare',
        config.curve_run_ids.map((id) => `/runs/get?run_id=${id}`), { charts: config.curve_run_ids }],
      ['#/jobs', 'jobs-table', 'Jobs', ['/jobs?max_results=1000', '/cluster']],
      [`#/jobs/${config.job_id}`, 'job-detail', 'Jobs', [`/jobs/${config.job_id}`, `/jobs/${config.job_id}/checkpoints`]],
      ['#/models', 'models-table', 'Models', ['/registered-models/search?']],
      [`#/models/${enc(config.model_name)}`, 'model-versions', 'Models',
        ['/registered-models/get?', '/model-versions/search?', '/registered-models/my-permissions?']],
      [`#/models/${enc(config.model_name)}/versions/1`, 'model-version', 'Models', ['/model-versions/get?'],
        { also: 'source-run-link' }],
      ['#/catalog', 'catalogs-table', 'Catalog', ['/unity-catalog/catalogs?']],
      [`#/catalog/${catalog}`, 'schemas-table', 'Catalog', ['/unity-catalog/schemas?']],
      [`#/catalog/${catalog}/${schema}`, 'tables-table', 'Catalog', ['/unity-catalog/tables?', '/unity-catalog/volumes?', '/unity-catalog/models?']],
      [`#/catalog/${catalog}/${schema}/${table}`, 'table-grants', 'Catalog',
        [`/unity-catalog/tables/${config.table}`, `/v1/tables/${config.table}/history`, `/v1/tables/${config.table}/rows?`,
          `/permissions/table/${config.table}`, `/permissions/catalog/${catalog}`]],
      [`#/lineage?object=${enc(`run:${config.writer_run}`)}`, 'lineage-graph', 'Lineage', ['/lineage?']],
      ['#/endpoints', 'endpoints-table', 'Endpoints', ['/v1/endpoints']],
      [`#/endpoints/${config.endpoint}`, 'no-requests', 'Endpoints', [`/endpoints/${config.endpoint}`, `/endpoints/${config.endpoint}/requests?`]],
    ];
    // `charts`: the runs of the page's charts, each chart's histories all in one request, the
    // one the entry module started once the runs' metric keys were in (the chart takes it);
    // `also`: a part that loads after the page's first answer (it must not ask twice either).
    for (const [route, testId, chunk, reads, { charts, also } = {}] of pages) {
      const context = await page.context().browser().newContext({ viewport: { width: 1280, height: 900 } });
      await context.addInitScript((token) => sessionStorage.setItem('trainyard.token', token), config.token);
      const tab = await context.newPage();
      const requests = [];
      tab.on('request', (r) => requests.push(`${r.method()} ${r.url().replace(base, '')}`));
      try {
        await tab.goto(`${base}/${route}`);
        await tab.getByTestId(testId).first().waitFor({ timeout: TIMEOUT });
        if (also) await tab.getByTestId(also).first().waitFor({ timeout: TIMEOUT });
        if (charts) {
          const chart = tab.locator(`[data-testid=metric-chart][data-metric="${config.chart_metric}"]`);
          await tab.evaluate(() => window.scrollTo(0, document.body.scrollHeight)); // charts mount on screen
          await until(async () => (await chart.getAttribute('data-loaded-runs')) === charts.join(','),
            `${route}: the ${config.chart_metric} chart holding the series of ${charts}`);
          const bulk = requests.filter((r) => r.includes('/metrics/downsample'));
          check(bulk.length === 1 && bulk[0].includes('/metrics/downsample-bulk?'),
            `${route}: the chart's histories: one request, not ${bulk.join(', ')}`);
        }
        const api = requests.filter((r) => r.includes(' /api/'));
        const twice = api.filter((r, i) => api.indexOf(r) !== i);
        check(twice.length === 0, `${route}: asked twice: ${twice.join(', ')} (of ${api.join(', ')})`);
        // The entry module asks for the page's reads, then for the page's chunk; a read the
        // page made itself would come after its chunk (and React) had loaded.
        const code = requests.findIndex((r) => new RegExp(`/assets/${chunk}-[^/]*\\.js$`).test(r));
        check(code > 0, `${route}: the page's chunk ${chunk} was not loaded: ${requests.join(', ')}`);
        for (const read of reads) {
          const at = requests.findIndex((r) => r.includes(' /api/') && r.includes(read));
          check(at >= 0, `${route}: no request for ${read}: ${api.join(', ')}`);
          check(at < code, `${route}: ${read} was asked for after the page's chunk, not by the entry module: ${requests.join(', ')}`);
        }
      } finally {
        await context.close();
      }
    }
  },
};

async function main() {
  const fn = scenarios[scenario];
  if (!fn) throw new Error(`unknown scenario ${scenario}; one of ${Object.keys(scenarios).join(', ')}`);
  const browser = await chromium.connectOverCDP(config.cdp);
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const origin = new URL(base).origin;
  await context.route('**/*', (route) =>
    new URL(route.request().url()).origin === origin ? route.continue() : route.abort());
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().includes('401') && !m.text().includes('400')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  const responses = [];
  page.on('response', (r) => responses.push(r));
  try {
    await fn(page, responses);
    check(problems.length === 0, `errors in the page: ${problems.join(' | ')}`);
    console.log(`ok ${scenario}`);
  } catch (e) {
    if (config.screenshot_dir) {
      mkdirSync(config.screenshot_dir, { recursive: true });
      const file = path.join(config.screenshot_dir, `${scenario}.png`);
      await page.screenshot({ path: file, fullPage: true }).catch(() => {});
      console.error(`screenshot: ${file}`);
    }
    console.error(`FAIL ${scenario}: ${e.stack ?? e}`);
    console.error(`page errors: ${problems.join(' | ')}`);
    process.exitCode = 1;
  } finally {
    await context.close();
    // The browser belongs to the test session: disconnect only.
    await browser.close();
  }
}

await main();

import { lazy, Suspense, useCallback, useEffect, useState, type ComponentType } from 'react';
import { clearToken, getToken, onUnauthorized, setToken, whoami, type Whoami } from './api';
import { Login } from './pages/Login';
import { takePrefetched, whoamiKey } from './prefetch';
import { href, useRoute, type Route } from './router';
import { errorMessage } from './util';

// Each page is its own chunk, fetched when first shown: the runs table, the page most links
// open, does not wait for the parsing of the charts (uPlot), the catalog or the jobs pages.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function page<M, K extends keyof M>(load: () => Promise<M>, name: K): ComponentType<any> {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return lazy(() => load().then((m) => ({ default: m[name] as ComponentType<any> })));
}
const Catalogs = page(() => import('./pages/Catalog'), 'Catalogs');
const CatalogPage = page(() => import('./pages/Catalog'), 'CatalogPage');
const SchemaPage = page(() => import('./pages/Catalog'), 'SchemaPage');
const TablePage = page(() => import('./pages/Catalog'), 'TablePage');
const Compare = page(() => import('./pages/Compare'), 'Compare');
const Endpoints = page(() => import('./pages/Endpoints'), 'Endpoints');
const EndpointPage = page(() => import('./pages/Endpoints'), 'EndpointPage');
const Lineage = page(() => import('./pages/Lineage'), 'Lineage');
const Experiments = page(() => import('./pages/Experiments'), 'Experiments');
const Jobs = page(() => import('./pages/Jobs'), 'Jobs');
const JobDetail = page(() => import('./pages/Jobs'), 'JobDetail');
const Models = page(() => import('./pages/Models'), 'Models');
const Model = page(() => import('./pages/Models'), 'Model');
const ModelVersionPage = page(() => import('./pages/Models'), 'ModelVersionPage');
const RunDetail = page(() => import('./pages/RunDetail'), 'RunDetail');
const Runs = page(() => import('./pages/Runs'), 'Runs');

type Session = { state: 'checking' } | { state: 'signed-out'; notice: string | null } | { state: 'signed-in'; who: Whoami };

export function App() {
  const route = useRoute();
  const [session, setSession] = useState<Session>(() =>
    getToken() ? { state: 'checking' } : { state: 'signed-out', notice: null },
  );

  const signOut = useCallback((notice: string | null) => {
    clearToken();
    setSession({ state: 'signed-out', notice });
  }, []);

  useEffect(() => {
    onUnauthorized((message) =>
      signOut(`The server no longer accepts your token (401 Unauthorized: ${message}). Sign in again.`),
    );
  }, [signOut]);

  // A token kept from earlier in this tab: check it once on load.
  useEffect(() => {
    if (session.state !== 'checking') return;
    (takePrefetched<Whoami>(whoamiKey) ?? whoami()).then(
      (who) => setSession({ state: 'signed-in', who }),
      (e) => signOut(errorMessage(e)),
    );
  }, [session.state, signOut]);

  if (session.state === 'checking') return <p className="muted">Checking your token…</p>;
  if (session.state === 'signed-out') {
    return (
      <Login
        notice={session.notice}
        onSignedIn={(token, who) => {
          setToken(token);
          setSession({ state: 'signed-in', who });
        }}
      />
    );
  }
  return (
    <div className="app">
      <header>
        <a className="brand" href={href.experiments()}>
          Trainyard
        </a>
        <nav>
          <a href={href.experiments()} className={navClass(route, ['experiments', 'runs', 'run', 'compare'])}>
            Experiments
          </a>
          <a href={href.jobs()} className={navClass(route, ['jobs', 'job'])}>
            Jobs
          </a>
          <a href={href.models()} className={navClass(route, ['models', 'model', 'model-version'])}>
            Models
          </a>
          <a href={href.catalogs()} className={navClass(route, ['catalogs', 'catalog', 'schema', 'table'])}>
            Catalog
          </a>
          <a href={href.endpoints()} className={navClass(route, ['endpoints', 'endpoint'])}>
            Endpoints
          </a>
        </nav>
        <span className="user" data-testid="current-user">
          {session.who.user}
          {session.who.is_admin ? ' (admin)' : ''}
        </span>
        <button type="button" onClick={() => signOut(null)}>
          Sign out
        </button>
      </header>
      <main>
        <Suspense fallback={<p className="muted">Loading…</p>}>
          <Page route={route} />
        </Suspense>
      </main>
    </div>
  );
}

function navClass(route: Route, pages: Route['page'][]): string {
  return pages.includes(route.page) ? 'active' : '';
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case 'experiments':
      return <Experiments />;
    case 'runs':
      return <Runs key={route.experimentId} experimentId={route.experimentId} />;
    case 'run':
      return <RunDetail key={route.runId} experimentId={route.experimentId} runId={route.runId} />;
    case 'compare':
      return <Compare experimentId={route.experimentId} runIds={route.runIds} />;
    case 'jobs':
      return <Jobs />;
    case 'job':
      return <JobDetail jobId={route.jobId} />;
    case 'models':
      return <Models />;
    case 'model':
      return <Model name={route.name} />;
    case 'model-version':
      return <ModelVersionPage name={route.name} version={route.version} />;
    case 'catalogs':
      return <Catalogs />;
    case 'catalog':
      return <CatalogPage key={route.catalog} catalog={route.catalog} />;
    case 'schema':
      return <SchemaPage key={`${route.catalog}.${route.schema}`} catalog={route.catalog} schema={route.schema} />;
    case 'table':
      return <TablePage key={`${route.catalog}.${route.schema}.${route.table}`} fullName={`${route.catalog}.${route.schema}.${route.table}`} />;
    case 'lineage':
      return <Lineage key={route.object} object={route.object} />;
    case 'endpoints':
      return <Endpoints />;
    case 'endpoint':
      return <EndpointPage key={route.name} name={route.name} />;
    case 'not-found':
      return (
        <p className="error">
          No page at #{route.path}. <a href={href.experiments()}>Go to the experiments</a>.
        </p>
      );
  }
}

import { useCallback, useEffect, useState } from 'react';
import { clearToken, getToken, onUnauthorized, setToken, whoami, type Whoami } from './api';
import { Catalogs, CatalogPage, SchemaPage, TablePage } from './pages/Catalog';
import { Compare } from './pages/Compare';
import { EndpointPage, Endpoints } from './pages/Endpoints';
import { Lineage } from './pages/Lineage';
import { Experiments } from './pages/Experiments';
import { JobDetail, Jobs } from './pages/Jobs';
import { Login } from './pages/Login';
import { Model, Models, ModelVersionPage } from './pages/Models';
import { RunDetail } from './pages/RunDetail';
import { Runs } from './pages/Runs';
import { href, useRoute, type Route } from './router';
import { errorMessage } from './util';

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
    whoami().then(
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
        <Page route={route} />
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

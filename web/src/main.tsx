// The entry module: small on purpose. It starts the opening page's requests (prefetch.ts)
// and the fetch of that page's chunk, then loads the app, so that React, the page's code and
// its data all travel at once instead of one after another (App.tsx would ask for the page's
// chunk only once the app has started and the token was checked). Every page is its own chunk.
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { startPrefetch } from './prefetch';
import { parseHash, type Route } from './routes';

// The same modules as App.tsx's lazy pages, so the chunk fetched here is the one it renders.
function pageChunk(route: Route): Promise<unknown> | null {
  switch (route.page) {
    case 'experiments':
      return import('./pages/Experiments');
    case 'runs':
      return import('./pages/Runs');
    case 'run':
      return import('./pages/RunDetail');
    case 'compare':
      return import('./pages/Compare');
    case 'jobs':
    case 'job':
      return import('./pages/Jobs');
    case 'models':
    case 'model':
    case 'model-version':
      return import('./pages/Models');
    case 'catalogs':
    case 'catalog':
    case 'schema':
    case 'table':
      return import('./pages/Catalog');
    case 'lineage':
      return import('./pages/Lineage');
    case 'endpoints':
    case 'endpoint':
      return import('./pages/Endpoints');
    default:
      return null;
  }
}

startPrefetch(window.location.hash);
void pageChunk(parseHash(window.location.hash))?.catch(() => {}); // App.tsx reports a failed load
void import('./boot');

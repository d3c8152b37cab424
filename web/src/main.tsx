// The entry module: small on purpose. It starts the opening page's requests (prefetch.ts),
// then loads the app; the runs page's code, the page most links open, is fetched alongside
// rather than after the app has started. Every other page is its own chunk (App.tsx).
import 'uplot/dist/uPlot.min.css';
import './styles.css';
import { runsPageExperiment, startPrefetch } from './prefetch';

startPrefetch(window.location.hash);
if (runsPageExperiment(window.location.hash) !== null) void import('./pages/Runs');
void import('./boot');

// The current route as React state; the routes themselves are in routes.ts.
import { useEffect, useState } from 'react';
import { parseHash, type Route } from './routes';

export { href, parseHash, type Route } from './routes';

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(window.location.hash));
  useEffect(() => {
    const update = () => setRoute(parseHash(window.location.hash));
    window.addEventListener('hashchange', update);
    return () => window.removeEventListener('hashchange', update);
  }, []);
  return route;
}

import { useState, type FormEvent } from 'react';
import { ApiError, whoami, type Whoami } from '../api';
import { errorMessage } from '../util';

// Sign-in: the user pastes a token (the admin token is in <data-dir>/admin.token; others come
// from 'trainyard tokens create'). It is checked against the server before it is kept.
export function Login({ notice, onSignedIn }: { notice: string | null; onSignedIn: (token: string, who: Whoami) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const t = token.trim();
    if (!t) {
      setError('Paste a token first.');
      return;
    }
    setBusy(true);
    setError(null);
    try {
      onSignedIn(t, await whoami(t));
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) {
        setError(
          `The server refused this token (401 Unauthorized: ${err.message}). Check that it is ` +
            'complete and not revoked; the admin token is in <data-dir>/admin.token, and ' +
            "'trainyard tokens create' makes a new one.",
        );
      } else {
        setError(errorMessage(err));
      }
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="login">
      <h1>Trainyard</h1>
      <form onSubmit={submit} aria-label="sign in">
        {notice ? <p className="error" role="alert" data-testid="signed-out-notice">{notice}</p> : null}
        <label htmlFor="token">API token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="off"
          value={token}
          onChange={(e) => setToken(e.target.value)}
          placeholder="paste a token"
        />
        <p className="muted">
          Kept for this browser tab only (sessionStorage). The admin token is in
          &lt;data-dir&gt;/admin.token.
        </p>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        {error ? <p className="error" role="alert" data-testid="login-error">{error}</p> : null}
      </form>
    </div>
  );
}

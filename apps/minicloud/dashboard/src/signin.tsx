import { useEffect, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';

type SignIn = { state: 'checking' } | { state: 'signed-in' } | { state: 'signed-out' };

/**
 * Shows `children` (the dashboard) once the server says the browser may read it: when it needs
 * no token, or the session cookie holds a valid one. Otherwise asks for a token and signs in
 * with `POST /api/session`, which sets an HttpOnly cookie the event stream then sends.
 */
export function SignInGate({ children }: { children: ComponentChildren }) {
  const [session, setSession] = useState<SignIn>({ state: 'checking' });
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    fetch('/api/session')
      .then((res) =>
        // A server without sessions (an older one, the fixture server) needs no sign-in.
        setSession({ state: res.status === 401 ? 'signed-out' : 'signed-in' }),
      )
      .catch(() => setSession({ state: 'signed-in' }));
  }, []);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const res = await fetch('/api/session', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ token: token.trim() }),
      });
      if (res.ok) {
        setToken('');
        setSession({ state: 'signed-in' });
        return;
      }
      const body = (await res.json().catch(() => null)) as {
        error?: { message?: string };
      } | null;
      setError(body?.error?.message ?? `sign-in failed (${res.status})`);
    } catch (err) {
      setError(`sign-in failed: ${String(err)}`);
    } finally {
      setBusy(false);
    }
  };

  if (session.state === 'checking') return <p class="muted signin-wait">Checking session…</p>;
  if (session.state === 'signed-in') return <>{children}</>;
  return (
    <main id="main" class="signin">
      <form class="card" onSubmit={(e) => void submit(e)} aria-labelledby="signin-h">
        <h1 id="signin-h">minicloud</h1>
        <p class="muted">
          This server requires a token. Create one with{' '}
          <code>minicloud token create --role reader</code>.
        </p>
        <label for="signin-token">Token</label>
        <input
          id="signin-token"
          type="password"
          autocomplete="off"
          required
          value={token}
          onInput={(e) => setToken((e.target as HTMLInputElement).value)}
          data-testid="signin-token"
        />
        <button type="submit" class="btn primary" disabled={busy} data-testid="signin-submit">
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        {error && (
          <p class="error" role="alert" data-testid="signin-error">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}

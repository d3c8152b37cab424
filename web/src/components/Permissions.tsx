// Actions the signed-in user may not take are shown disabled, with the server's reason (the
// privilege that is missing and who may grant it). The decision comes from the object's
// `.../my-permissions` route, which runs the same check as the action's own route; the action
// itself still goes through the API's authorization.
import type { ReactNode } from 'react';
import { call } from '../api';
import { useLoad } from '../util';

export interface ActionDecision {
  action: string;
  allowed: boolean;
  reason: string;
}

export type Decisions = Record<string, ActionDecision>;

// The decisions for the object at `path` (e.g. /api/trainyard/v1/jobs/ID/my-permissions);
// null while they load. Should the question itself fail, every action is shown as allowed
// and the action's own refusal is shown when tried.
export function useDecisions(path: string, query?: Record<string, string>, deps: unknown[] = []): Decisions | null {
  const loaded = useLoad(
    () => call<{ actions: ActionDecision[] }>('GET', path, { query }).catch(() => ({ actions: [] })),
    [path, JSON.stringify(query ?? {}), ...deps],
  );
  if (loaded.state !== 'ok') return null;
  const out: Decisions = {};
  for (const a of loaded.value.actions) out[a.action] = a;
  return out;
}

export function allowed(decisions: Decisions | null, action: string): boolean {
  return decisions?.[action]?.allowed ?? true;
}

// A button that is disabled, with the reason beside it and as its tooltip, when the server
// says the user may not take the action.
export function ActionButton({
  decisions,
  action,
  onClick,
  children,
  type = 'button',
}: {
  decisions: Decisions | null;
  action: string;
  onClick?: () => void;
  children: ReactNode;
  type?: 'button' | 'submit';
}) {
  const d = decisions?.[action];
  const denied = d !== undefined && !d.allowed;
  return (
    <>
      <button
        type={type}
        onClick={onClick}
        disabled={decisions === null || denied}
        title={denied ? d.reason : undefined}
        data-action={action}
      >
        {children}
      </button>
      {denied ? <DeniedReason reason={d.reason} /> : null}
    </>
  );
}

export function DeniedReason({ reason }: { reason: string }) {
  return (
    <span className="denied" data-testid="denied-reason">
      Not allowed: {reason}
    </span>
  );
}

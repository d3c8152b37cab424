import { useState, type FormEvent } from 'react';
import { call, getRun, MLFLOW, TRAINYARD } from '../api';
import { ActionButton, DeniedReason, useDecisions, type Decisions } from '../components/Permissions';
import { KeyValueTable, Show } from '../components/Status';
import { href } from '../router';
import { errorMessage, formatTime, useLoad } from '../util';

interface Alias {
  alias: string;
  version: string;
}

interface ModelVersion {
  name: string;
  version: string;
  creation_timestamp: number;
  current_stage: string;
  source: string;
  run_id?: string;
  status: string;
  description?: string;
  aliases?: string[];
  tags?: { key: string; value: string }[];
}

interface RegisteredModel {
  name: string;
  creation_timestamp: number;
  last_updated_timestamp: number;
  description?: string;
  latest_versions?: ModelVersion[];
  aliases?: Alias[];
}

async function searchModels(): Promise<RegisteredModel[]> {
  const out: RegisteredModel[] = [];
  let page_token: string | undefined;
  do {
    const r = await call<{ registered_models?: RegisteredModel[]; next_page_token?: string }>(
      'GET',
      `${MLFLOW}/registered-models/search`,
      { query: { max_results: 1000, page_token } },
    );
    out.push(...(r.registered_models ?? []));
    page_token = r.next_page_token || undefined;
  } while (page_token);
  return out;
}

function latestVersion(m: RegisteredModel): string {
  const vs = (m.latest_versions ?? []).map((v) => Number(v.version));
  return vs.length ? String(Math.max(...vs)) : '';
}

export function Models() {
  const models = useLoad(searchModels, []);
  return (
    <section>
      <h2>Registered models</h2>
      <Show loaded={models}>
        {(list) =>
          list.length === 0 ? (
            <p className="muted">No registered models yet: register one with mlflow.register_model.</p>
          ) : (
            <table className="grid" data-testid="models-table">
              <thead>
                <tr>
                  <th>Name</th>
                  <th>Latest version</th>
                  <th>Aliases</th>
                  <th>Updated</th>
                </tr>
              </thead>
              <tbody>
                {list.map((m) => (
                  <tr key={m.name}>
                    <td>
                      <a href={href.model(m.name)}>{m.name}</a>
                    </td>
                    <td>{latestVersion(m)}</td>
                    <td>{(m.aliases ?? []).map((a) => `@${a.alias} → v${a.version}`).join(', ')}</td>
                    <td>{formatTime(m.last_updated_timestamp)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Show>
    </section>
  );
}

// Points an alias (new or existing) at a version, after a confirmation that says what moves.
function MoveAlias({ name, aliases, versions, onDone, decisions }: {
  name: string;
  aliases: Alias[];
  versions: string[];
  onDone: () => void;
  decisions: Decisions | null;
}) {
  const edit = decisions?.edit;
  if (edit && !edit.allowed) {
    return (
      <p className="actions" aria-label="move alias">
        <button type="button" disabled title={edit.reason}>
          Move alias
        </button>
        <DeniedReason reason={edit.reason} />
      </p>
    );
  }
  const [alias, setAlias] = useState(aliases[0]?.alias ?? '');
  const [version, setVersion] = useState(versions[0] ?? '');
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const current = aliases.find((a) => a.alias === alias.trim());
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    if (!alias.trim()) setError('Name the alias to move.');
    else if (current?.version === version) setError(`@${alias.trim()} already points at version ${version}.`);
    else setConfirming(true);
  };
  const move = async () => {
    try {
      await call('POST', `${MLFLOW}/registered-models/alias`, { body: { name, alias: alias.trim(), version } });
      setConfirming(false);
      onDone();
    } catch (e) {
      setError(errorMessage(e));
      setConfirming(false);
    }
  };
  return (
    <form className="actions" onSubmit={submit} aria-label="move alias">
      <label>
        Alias @
        <input value={alias} onChange={(e) => { setAlias(e.target.value); setConfirming(false); }} list="model-aliases-list" aria-label="alias" />
      </label>
      <datalist id="model-aliases-list">
        {aliases.map((a) => (
          <option key={a.alias} value={a.alias} />
        ))}
      </datalist>
      <label>
        to version{' '}
        <select value={version} onChange={(e) => { setVersion(e.target.value); setConfirming(false); }} aria-label="version">
          {versions.map((v) => (
            <option key={v} value={v}>
              {v}
            </option>
          ))}
        </select>
      </label>
      {confirming ? (
        <>
          <span data-testid="alias-confirm">
            Move @{alias.trim()} {current ? `from version ${current.version} ` : ''}to version {version}? Whatever
            resolves models:/{name}@{alias.trim()} (serving endpoints too) follows it.
          </span>
          <button type="button" onClick={move}>
            Yes, move it
          </button>
          <button type="button" onClick={() => setConfirming(false)}>
            No
          </button>
        </>
      ) : (
        <ActionButton decisions={decisions} action="edit" type="submit">
          Move alias
        </ActionButton>
      )}
      {error ? <p className="error" role="alert">{error}</p> : null}
    </form>
  );
}

export function Model({ name }: { name: string }) {
  const [reloads, setReloads] = useState(0);
  const loaded = useLoad(
    () =>
      Promise.all([
        call<{ registered_model: RegisteredModel }>('GET', `${MLFLOW}/registered-models/get`, { query: { name } }),
        call<{ model_versions?: ModelVersion[] }>('GET', `${MLFLOW}/model-versions/search`, {
          query: { filter: `name='${name.replace(/'/g, "\\'")}'`, max_results: 1000 },
        }),
      ]),
    [name, reloads],
  );
  const decisions = useDecisions(`${TRAINYARD}/registered-models/my-permissions`, { name });
  return (
    <section>
      <p className="crumbs">
        <a href={href.models()}>Models</a> /
      </p>
      <h2>{name}</h2>
      <Show loaded={loaded}>
        {([{ registered_model: m }, { model_versions }]) => {
          const versions = [...(model_versions ?? [])].sort((a, b) => Number(b.version) - Number(a.version));
          return (
            <div data-testid="model-detail">
              {m.description ? <p>{m.description}</p> : null}
              <h3>Aliases</h3>
              <KeyValueTable
                testId="model-aliases"
                empty="No aliases."
                rows={(m.aliases ?? []).map((a) => [
                  `@${a.alias}`,
                  <a href={href.modelVersion(name, a.version)}>version {a.version}</a>,
                ])}
              />
              {versions.length ? (
                <MoveAlias
                  name={name}
                  aliases={m.aliases ?? []}
                  versions={versions.map((v) => v.version)}
                  onDone={() => setReloads((n) => n + 1)}
                  decisions={decisions}
                />
              ) : null}
              <h3>Versions</h3>
              <table className="grid" data-testid="model-versions">
                <thead>
                  <tr>
                    <th>Version</th>
                    <th>Status</th>
                    <th>Stage</th>
                    <th>Aliases</th>
                    <th>Source run</th>
                    <th>Created</th>
                  </tr>
                </thead>
                <tbody>
                  {versions.map((v) => (
                    <tr key={v.version}>
                      <td>
                        <a href={href.modelVersion(name, v.version)}>{v.version}</a>
                      </td>
                      <td>{v.status}</td>
                      <td>{v.current_stage}</td>
                      <td>{(v.aliases ?? []).map((a) => `@${a}`).join(', ')}</td>
                      <td>{v.run_id ?? ''}</td>
                      <td>{formatTime(v.creation_timestamp)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          );
        }}
      </Show>
    </section>
  );
}

export function ModelVersionPage({ name, version }: { name: string; version: string }) {
  const loaded = useLoad(
    () => call<{ model_version: ModelVersion }>('GET', `${MLFLOW}/model-versions/get`, { query: { name, version } }),
    [name, version],
  );
  return (
    <section>
      <p className="crumbs">
        <a href={href.models()}>Models</a> / <a href={href.model(name)}>{name}</a> /
      </p>
      <h2>
        {name} version {version}
      </h2>
      <Show loaded={loaded}>
        {({ model_version: v }) => (
          <KeyValueTable
            testId="model-version"
            empty=""
            rows={[
              ['Status', v.status],
              ['Stage', v.current_stage],
              ['Aliases', (v.aliases ?? []).map((a) => `@${a}`).join(', ')],
              ['Source', v.source],
              ['Run', v.run_id ? <SourceRun runId={v.run_id} /> : ''],
              ['Created', formatTime(v.creation_timestamp)],
              [
                'Lineage',
                <a href={href.lineage(`model_version:${name}@${version}`)} data-testid="lineage-link">
                  what it was made from, and what serves it
                </a>,
              ],
              ['Description', v.description ?? ''],
              ...(v.tags ?? []).map((t): [string, string] => [`tag ${t.key}`, t.value]),
            ]}
          />
        )}
      </Show>
    </section>
  );
}

// A version's source run, linked to its run page once its experiment is known (the version
// names only the run); the bare id when the run cannot be read (deleted, or not the user's to
// see): the reason is the run page's to show.
function SourceRun({ runId }: { runId: string }) {
  const run = useLoad(() => getRun(runId), [runId]);
  if (run.state !== 'ok') return <span data-testid="source-run">{runId}</span>;
  const { experiment_id, run_name } = run.value.info;
  return (
    <span data-testid="source-run">
      <a href={href.run(experiment_id, runId)} data-testid="source-run-link">
        {runId}
      </a>
      {run_name ? <span className="muted"> ({run_name})</span> : null}
    </span>
  );
}

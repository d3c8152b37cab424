import { useEffect, useState } from 'react';
import { call, getToken, MLFLOW } from '../api';
import { errorMessage, useLoad } from '../util';
import { Show } from './Status';

interface FileInfo {
  path: string;
  is_dir: boolean;
  file_size?: number;
}

const MAX_PREVIEW_BYTES = 2 << 20;
const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp',
  svg: 'image/svg+xml',
};
const TEXT_EXTENSIONS = new Set(['txt', 'log', 'md', 'yaml', 'yml', 'csv', 'tsv', 'py', 'sh', 'toml', 'ini', 'cfg', 'jsonl']);

function extension(path: string): string {
  const base = path.slice(path.lastIndexOf('/') + 1);
  return base.includes('.') ? base.slice(base.lastIndexOf('.') + 1).toLowerCase() : base;
}

function kindOf(path: string): 'image' | 'json' | 'text' | 'other' {
  const ext = extension(path);
  if (ext in IMAGE_TYPES) return 'image';
  if (ext === 'json') return 'json';
  if (TEXT_EXTENSIONS.has(ext) || ['MLmodel', 'requirements.txt', 'LICENSE'].includes(ext)) return 'text';
  return 'other';
}

// The artifact bytes go through the artifact proxy with the token (a plain <img src> or link
// could not carry it), so previews are blobs: images shown from blob: URLs, which the CSP allows.
async function fetchArtifact(artifactUri: string, path: string): Promise<Blob> {
  const root = artifactUri.replace(/^mlflow-artifacts:(\/\/[^/]*)?\/*/, '');
  const key = `${root}/${path}`.split('/').map(encodeURIComponent).join('/');
  const response = await fetch(`/api/2.0/mlflow-artifacts/artifacts/${key}`, {
    headers: { Authorization: `Bearer ${getToken() ?? ''}` },
    credentials: 'omit',
  });
  if (!response.ok) throw new Error(`${(await response.text()) || response.statusText} (HTTP ${response.status})`);
  return response.blob();
}

export function Artifacts({ runId, artifactUri }: { runId: string; artifactUri: string }) {
  const [dir, setDir] = useState('');
  const [selected, setSelected] = useState<FileInfo | null>(null);
  const listing = useLoad(
    () => call<{ files?: FileInfo[] }>('GET', `${MLFLOW}/artifacts/list`, { query: { run_id: runId, path: dir || undefined } }),
    [runId, dir],
  );
  const proxied = artifactUri.startsWith('mlflow-artifacts:');
  return (
    <div className="artifacts" data-testid="artifacts">
      <div className="artifact-list">
        <p className="crumbs">
          <button type="button" className="link" onClick={() => setDir('')}>
            artifacts
          </button>
          {dir
            .split('/')
            .filter(Boolean)
            .map((part, i, parts) => (
              <span key={i}>
                {' / '}
                <button type="button" className="link" onClick={() => setDir(parts.slice(0, i + 1).join('/'))}>
                  {part}
                </button>
              </span>
            ))}
        </p>
        <Show loaded={listing}>
          {({ files }) =>
            !files || files.length === 0 ? (
              <p className="muted">No artifacts{dir ? ' here' : ''}.</p>
            ) : (
              <ul className="files">
                {files.map((f) => {
                  const name = f.path.slice(f.path.lastIndexOf('/') + 1);
                  return (
                    <li key={f.path}>
                      <button
                        type="button"
                        className={'link' + (selected?.path === f.path ? ' active' : '')}
                        onClick={() => (f.is_dir ? setDir(f.path) : setSelected(f))}
                      >
                        {f.is_dir ? `${name}/` : name}
                      </button>
                      {f.is_dir ? null : <span className="muted"> {formatBytes(f.file_size ?? 0)}</span>}
                    </li>
                  );
                })}
              </ul>
            )
          }
        </Show>
      </div>
      <div className="artifact-preview">
        {selected ? (
          proxied ? (
            <Preview key={selected.path} artifactUri={artifactUri} file={selected} />
          ) : (
            <p className="muted">Previews need the server's artifact proxy; this run's artifacts are at {artifactUri}.</p>
          )
        ) : (
          <p className="muted">Select a file to preview it.</p>
        )}
      </div>
    </div>
  );
}

function Preview({ artifactUri, file }: { artifactUri: string; file: FileInfo }) {
  const kind = kindOf(file.path);
  const [content, setContent] = useState<{ text?: string; url?: string; blob?: Blob } | { error: string } | null>(null);
  useEffect(() => {
    let live = true;
    let url: string | undefined;
    if ((file.file_size ?? 0) > MAX_PREVIEW_BYTES && kind !== 'other') {
      setContent({ error: `${formatBytes(file.file_size ?? 0)} is too large to preview here.` });
      return;
    }
    fetchArtifact(artifactUri, file.path).then(
      async (blob) => {
        if (!live) return;
        if (kind === 'image') {
          url = URL.createObjectURL(new Blob([blob], { type: IMAGE_TYPES[extension(file.path)] }));
          setContent({ url, blob });
        } else if ((kind === 'json' || kind === 'text') && blob.size <= MAX_PREVIEW_BYTES) {
          let text = await blob.text();
          if (kind === 'json') {
            try {
              text = JSON.stringify(JSON.parse(text), null, 2);
            } catch {
              /* shown as it is */
            }
          }
          if (live) setContent({ text, blob });
        } else {
          setContent({ blob });
        }
      },
      (e) => live && setContent({ error: errorMessage(e) }),
    );
    return () => {
      live = false;
      if (url) URL.revokeObjectURL(url);
    };
  }, [artifactUri, file.path, file.file_size, kind]);
  const download = () => {
    if (!content || 'error' in content || !content.blob) return;
    const a = document.createElement('a');
    a.href = URL.createObjectURL(content.blob);
    a.download = file.path.slice(file.path.lastIndexOf('/') + 1);
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  };
  return (
    <div data-testid="artifact-preview" data-path={file.path}>
      <div className="toolbar">
        <strong>{file.path}</strong>
        <button type="button" onClick={download} disabled={!content || 'error' in content}>
          Download
        </button>
      </div>
      {content === null ? <p className="muted">Loading…</p> : null}
      {content && 'error' in content ? <p className="error">{content.error}</p> : null}
      {content && !('error' in content) && content.url ? <img src={content.url} alt={file.path} className="preview-image" /> : null}
      {content && !('error' in content) && content.text !== undefined ? <pre className="preview-text">{content.text}</pre> : null}
      {content && !('error' in content) && !content.url && content.text === undefined ? (
        <p className="muted">No preview for this kind of file.</p>
      ) : null}
    </div>
  );
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MB`;
  return `${(n / (1 << 30)).toFixed(1)} GB`;
}

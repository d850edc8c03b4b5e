/**
 * The page's only link to the server: the OpenAI-compatible routes, same origin.
 *
 * streamChat reads /v1/chat/completions as server-sent events and yields each parsed chunk;
 * every failure becomes an ApiError whose `kind` tells the page what to say (network,
 * auth, busy, client, server). An AbortError from the caller's signal passes through as is.
 */

/** A failed call; kind is 'network' | 'auth' | 'busy' | 'client' | 'server'. */
export class ApiError extends Error {
  constructor(message, { kind = 'server', status = 0, retryAfter = null } = {}) {
    super(message);
    this.name = 'ApiError';
    this.kind = kind;
    this.status = status; // HTTP status, 0 when no response came
    this.retryAfter = retryAfter; // seconds, from a 429's Retry-After header
  }
}

function headers(apiKey, json = false) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

function kindOf(status) {
  if (status === 401 || status === 403) return 'auth';
  if (status === 429 || status === 503) return 'busy';
  return status < 500 ? 'client' : 'server';
}

async function errorFrom(resp) {
  let detail = resp.statusText || '';
  try {
    const body = await resp.json();
    if (body && body.error && body.error.message) detail = body.error.message;
  } catch {
    // not JSON: keep the status text
  }
  const retry = parseInt(resp.headers.get('Retry-After') || '', 10);
  return new ApiError(`${resp.status}${detail ? `: ${detail}` : ''}`, {
    kind: kindOf(resp.status), status: resp.status, retryAfter: Number.isNaN(retry) ? null : retry,
  });
}

async function send(url, init) {
  try {
    return await fetch(url, init);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError('Cannot reach the server. Is it still running?', { kind: 'network' });
  }
}

/** Ids of the models the server serves (GET /v1/models). */
export async function listModels(apiKey) {
  const resp = await send('v1/models', { headers: headers(apiKey) });
  if (!resp.ok) throw await errorFrom(resp);
  const body = await resp.json();
  return (body.data || []).map((m) => m.id);
}

/**
 * Streams one chat completion: yields each JSON chunk of the SSE stream, in order, and
 * returns at `data: [DONE]`. `body` is the OpenAI request body (stream is forced on).
 */
export async function* streamChat(body, { apiKey, signal } = {}) {
  const resp = await send('v1/chat/completions', {
    method: 'POST',
    headers: headers(apiKey, true),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!resp.ok) throw await errorFrom(resp);
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (err.name === 'AbortError') throw err;
        throw new ApiError('The connection to the server was lost mid-answer.', { kind: 'network' });
      }
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      const events = buffer.split(/\r?\n\r?\n/);
      buffer = events.pop(); // the last piece may be an incomplete event
      for (const event of events) {
        const data = event.split(/\r?\n/)
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).replace(/^ /, ''))
          .join('\n');
        if (!data) continue;
        if (data === '[DONE]') return;
        let parsed;
        try {
          parsed = JSON.parse(data);
        } catch {
          throw new ApiError(`The server sent an unreadable event: ${data.slice(0, 80)}`);
        }
        if (parsed.error) throw new ApiError(parsed.error.message || 'The server reported an error.');
        yield parsed;
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // closes the body when the caller stops early
  }
  throw new ApiError('The answer ended before the server finished it.', { kind: 'network' });
}

/** Asks the server to stop request `id` (the chatcmpl-... id of its chunks). Best effort. */
export async function cancelRequest(id, apiKey) {
  try {
    await fetch(`v1/requests/${encodeURIComponent(id)}/cancel`, {
      method: 'POST', headers: headers(apiKey), keepalive: true,
    });
  } catch {
    // the aborted fetch also tells the server the client is gone
  }
}

/** The words the page shows for `err`; hasKey tells a refused key from a missing one. */
export function describeError(err, hasKey) {
  if (!(err instanceof ApiError)) return `Unexpected error: ${err.message}`;
  switch (err.kind) {
    case 'network': return err.message;
    case 'auth': return hasKey
      ? `The server refused the API key (${err.message}). Check it in Settings, then send again.`
      : `This server needs an API key (${err.message}). Enter it in Settings, then send again.`;
    case 'busy': return `The server is busy (${err.message}). Try again${
      err.retryAfter !== null ? ` in ${err.retryAfter} s` : ' shortly'}.`;
    case 'client': return `The server rejected the request (${err.message}).`;
    default: return `Server error (${err.message}).`;
  }
}

/**
 * One streamed answer: feeds its text to a callback and keeps the figures shown under it.
 *
 * AnswerRun holds what is known about the answer so far (the server's request id, timing,
 * chunk count, the usage chunk), so that a stopped or failed answer still has its stats.
 */

import { streamChat } from './api.js';

export class AnswerRun {
  constructor() {
    this.requestId = null; // chatcmpl-... id from the first chunk, for the cancel route
    this.t0 = performance.now(); // when the request was sent
    this.tFirst = null; // when the first answer text arrived
    this.tEnd = null; // when the stream ended
    this.chunks = 0; // chunks that carried text (the token count when no usage came)
    this.usage = null; // the final usage chunk's usage, if any
    this.finish = null; // finish_reason: stop, length, abort, ...
  }

  /** { completion_tokens, finish_reason, ttft_ms?, tokens_per_s?, prompt_tokens?, cached_tokens? } */
  stats() {
    const end = this.tEnd ?? performance.now();
    const n = this.usage?.completion_tokens ?? this.chunks;
    const stats = { completion_tokens: n, finish_reason: this.finish };
    if (this.tFirst !== null) {
      stats.ttft_ms = this.tFirst - this.t0;
      // Decode speed: tokens after the first over the time after the first.
      if (n > 1 && end > this.tFirst) stats.tokens_per_s = (n - 1) / ((end - this.tFirst) / 1000);
    }
    if (this.usage) {
      stats.prompt_tokens = this.usage.prompt_tokens;
      stats.cached_tokens = this.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
    return stats;
  }
}

/**
 * Streams the answer to `body` (an OpenAI chat request), calling onText(delta) for each
 * piece of text; resolves when the server ends the stream, throws what streamChat throws.
 */
export async function streamAnswer(body, run, { apiKey, signal, onText }) {
  run.t0 = performance.now();
  try {
    for await (const chunk of streamChat(body, { apiKey, signal })) {
      if (chunk.id && !run.requestId) run.requestId = chunk.id;
      if (chunk.usage) run.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      const delta = choice.delta?.content || '';
      if (delta) {
        if (run.tFirst === null) run.tFirst = performance.now();
        run.chunks++;
        onText(delta);
      }
      if (choice.finish_reason) run.finish = choice.finish_reason;
    }
  } finally {
    run.tEnd = performance.now();
  }
}

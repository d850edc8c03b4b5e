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
    this.finish = null; // finish_reason: stop, length, abort, tool_calls, ...
    this.tReasonStart = null; // when the first reasoning text arrived
    this.tReasonEnd = null; // when the answer (or a tool call) followed it
  }

  /** Milliseconds the model spent reasoning so far (null when it has not reasoned). */
  reasoningMs() {
    if (this.tReasonStart === null) return null;
    return (this.tReasonEnd ?? this.tEnd ?? performance.now()) - this.tReasonStart;
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
 * piece of answer text, onReasoning(delta) for each piece of a reasoning model's
 * reasoning_content, and onToolCall(index, head, argumentsDelta) for tool calls (head is
 * { id, name } on a call's first chunk, else null); resolves when the server ends the
 * stream, throws what streamChat throws.
 */
export async function streamAnswer(body, run, { apiKey, signal, onText, onReasoning = () => {}, onToolCall = () => {} }) {
  run.t0 = performance.now();
  try {
    for await (const chunk of streamChat(body, { apiKey, signal })) {
      if (chunk.id && !run.requestId) run.requestId = chunk.id;
      if (chunk.usage) run.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      const thought = choice.delta?.reasoning_content || '';
      if (thought) {
        if (run.tFirst === null) run.tFirst = performance.now();
        if (run.tReasonStart === null) run.tReasonStart = performance.now();
        run.chunks++;
        onReasoning(thought);
      }
      for (const call of choice.delta?.tool_calls || []) {
        if (run.tReasonStart !== null && run.tReasonEnd === null) run.tReasonEnd = performance.now();
        if (run.tFirst === null) run.tFirst = performance.now();
        const head = call.id ? { id: call.id, name: call.function?.name || '' } : null;
        onToolCall(call.index, head, call.function?.arguments || '');
      }
      const delta = choice.delta?.content || '';
      if (delta) {
        if (run.tReasonStart !== null && run.tReasonEnd === null) run.tReasonEnd = performance.now();
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

#!/usr/bin/env node
// Parse an AI SDK v5 UI message stream (SSE body) from stdin and print the final
// assembled UIMessage as JSON on stdout.
//
// The pipeline is the one the `ai` package's own DefaultChatTransport (useChat) uses:
//   bytes -> parseJsonEventStream({schema: uiMessageChunkSchema})  (SSE + JSON + schema)
//         -> throw on a chunk that fails the schema
//         -> readUIMessageStream()                                 (assembles UIMessage)
//
// Usage: node parse_ui_stream.mjs [--no-validate] [--all] < body.sse
//   --no-validate  skip uiMessageChunkSchema (plain JSON.parse per `data:` line), to see
//                  what readUIMessageStream alone accepts.
//   --all          print {"final": <message>, "snapshots": n, "chunks": [...]}.
// Exit codes: 0 ok; 1 malformed chunk / processing error (message on stderr);
//             2 stream produced no message.
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema } from 'ai';

const args = new Set(process.argv.slice(2));
const validate = !args.has('--no-validate');
const printAll = args.has('--all');

// One-line summary of an error. For a schema failure (TypeValidationError wrapping a
// ZodError over the chunk union) report the offending value and the issues of the union
// branch(es) whose `type` matched, not all 25 branches.
function summarize(err) {
  if (!(err instanceof Error)) return String(err);
  const issues = err.cause && Array.isArray(err.cause.issues) ? err.cause.issues : null;
  if (err.name === 'AI_TypeValidationError' && issues) {
    const details = [];
    for (const issue of issues) {
      if (issue.code === 'invalid_union' && Array.isArray(issue.errors)) {
        for (const branch of issue.errors) {
          if (branch.some(i => i.path && i.path[0] === 'type')) continue; // type did not match
          for (const i of branch) details.push(`${i.path.join('.') || '<root>'}: ${i.message}`);
        }
      } else {
        details.push(`${(issue.path || []).join('.') || '<root>'}: ${issue.message}`);
      }
    }
    const value = JSON.stringify(err.value);
    return `${value}: ${details.length ? details.join('; ') : 'unknown chunk type'}`;
  }
  return `${err.name}: ${err.message}`.replace(/\s+/g, ' ').slice(0, 500);
}

function fail(prefix, err) {
  process.stderr.write(`${prefix}: ${summarize(err)}\n`);
  process.exit(1);
}

async function readStdin() {
  const parts = [];
  for await (const c of process.stdin) parts.push(c);
  return Buffer.concat(parts);
}

// Minimal SSE splitter used only with --no-validate (same framing rules for `data:` lines).
function naiveChunks(text) {
  const out = [];
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event.split(/\r?\n/).filter(l => l.startsWith('data:'))
      .map(l => l.slice(5).replace(/^ /, '')).join('\n');
    if (!data || data === '[DONE]') continue;
    out.push(JSON.parse(data));
  }
  return out;
}

const body = await readStdin();
const seen = [];
let chunkStream;
if (validate) {
  const bytes = new ReadableStream({
    start(c) { c.enqueue(new Uint8Array(body)); c.close(); },
  });
  chunkStream = parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) throw result.error; // same as DefaultChatTransport
        seen.push(result.value);
        controller.enqueue(result.value);
      },
    }),
  );
} else {
  let chunks;
  try { chunks = naiveChunks(body.toString('utf8')); } catch (e) { fail('invalid JSON', e); }
  chunkStream = new ReadableStream({
    start(c) { for (const ch of chunks) { seen.push(ch); c.enqueue(ch); } c.close(); },
  });
}

let final;
let snapshots = 0;
try {
  for await (const msg of readUIMessageStream({
    stream: chunkStream,
    terminateOnError: true,
    onError: () => {},
  })) {
    final = msg;
    snapshots += 1;
  }
} catch (e) {
  fail('UI message stream error', e);
}
if (final === undefined) {
  process.stderr.write('no UIMessage produced (empty stream?)\n');
  process.exit(2);
}
process.stdout.write(JSON.stringify(printAll ? { final, snapshots, chunks: seen } : final) + '\n');

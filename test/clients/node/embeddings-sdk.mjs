// Tollway's POST /v1/embeddings with the official OpenAI Node SDK, unmodified.
//
// The Go end-to-end suite (TestEmbeddingsSDKs) runs `node --test embeddings-sdk.mjs` with:
//   TOLLWAY_BASE_URL      gateway base URL, e.g. http://127.0.0.1:PORT/v1
//   TOLLWAY_API_KEY       a valid gateway key (ale-...)
//   TOLLWAY_MODEL         an embeddings model on an OpenAI-compatible provider
//   TOLLWAY_GEMINI_MODEL  an embeddings model on Gemini (the gateway encodes base64 itself)
//   TOLLWAY_EXPECTED      JSON: "<input>|<dimensions>" -> base64 of the float32s the fake draws
// (Its name keeps it out of the chat suite's `node --test`.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { env, gatewayClient } from './gateway.mjs';

const client = gatewayClient();
const model = env('TOLLWAY_MODEL');
const want = JSON.parse(env('TOLLWAY_EXPECTED'));

function float32s(b64) {
  const raw = Buffer.from(b64, 'base64');
  return Array.from(new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4));
}

const expected = (text, dims = 0) => float32s(want[`${text}|${dims}`]);
// A float answer's JSON numbers are float32s printed shortest: compared as float32s.
const asFloat32 = (values) => values.map(Math.fround);

test('the default (base64, decoded by the SDK) gives the fake\'s vector', async () => {
  const resp = await client.embeddings.create({ model, input: 'hello from the SDK' });
  assert.equal(resp.model, model);
  assert.equal(resp.data.length, 1);
  assert.deepEqual(asFloat32(resp.data[0].embedding), expected('hello from the SDK'));
  assert.equal(resp.usage.prompt_tokens, 4);
});

test('float, a list of inputs, dimensions', async () => {
  const resp = await client.embeddings.create({ model, input: ['hello from the SDK', 'second input'], dimensions: 12, encoding_format: 'float' });
  assert.deepEqual(resp.data.map((d) => d.index), [0, 1]);
  assert.deepEqual(asFloat32(resp.data[0].embedding), expected('hello from the SDK', 12));
  assert.deepEqual(asFloat32(resp.data[1].embedding), expected('second input', 12));
});

test('explicit base64 is left to the caller', async () => {
  const resp = await client.embeddings.create({ model, input: 'second input', encoding_format: 'base64' });
  assert.deepEqual(float32s(resp.data[0].embedding), expected('second input'));
});

test('a Gemini answer, base64 encoded by the gateway', async () => {
  const resp = await client.embeddings.create({ model: env('TOLLWAY_GEMINI_MODEL'), input: 'hello from the SDK', dimensions: 12 });
  assert.deepEqual(asFloat32(resp.data[0].embedding), expected('hello from the SDK', 12));
  assert.ok(resp.usage.prompt_tokens > 0);
});

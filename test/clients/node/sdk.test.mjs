// Tollway through the official OpenAI Node SDK.
//
// The Go end-to-end suite starts Tollway in front of the fake upstream and runs
// `npm test` here with:
//   TOLLWAY_BASE_URL        gateway base URL, e.g. http://127.0.0.1:PORT/v1
//   TOLLWAY_API_KEY         a valid gateway key (ale-...)
//   TOLLWAY_MODEL           a catalog model id routed to the fake upstream
//   TOLLWAY_UPSTREAM_MODEL  the upstream model name the fake echoes back
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  },
};
const toolResult = '22C and sunny';

// A missing variable fails: a skipped suite would look green in CI.
function env(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set; these tests run against a live Tollway, see sdk.test.mjs`);
  }
  return value;
}

function client(apiKey = env('TOLLWAY_API_KEY')) {
  // No retries: they would hide the gateway's first answer.
  return new OpenAI({ baseURL: env('TOLLWAY_BASE_URL'), apiKey, maxRetries: 0, timeout: 30_000 });
}

// The fake upstream answers "Hello from <name>/<upstream model>: <prompt>",
// so the model part proves the gateway rewrote the catalog id.
function expectedReply(prompt) {
  const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^Hello from .+/${esc(env('TOLLWAY_UPSTREAM_MODEL'))}: ${esc(prompt)}$`);
}

function assertGatewayError(err, status) {
  assert.equal(err.status, status);
  assert.ok(err.error?.message, `no error message in ${JSON.stringify(err.error)}`);
  assert.ok(err.code, `no error code in ${JSON.stringify(err.error)}`);
  const requestID = err.headers?.get('x-request-id');
  assert.ok(requestID, 'no x-request-id header');
  assert.equal(err.error.request_id, requestID);
  assert.equal(err.requestID, requestID);
}

test('plain completion', async () => {
  const prompt = 'Say hello to Tollway';
  const resp = await client().chat.completions.create({
    model: env('TOLLWAY_MODEL'),
    messages: [{ role: 'user', content: prompt }],
    user: 'sdk-node',
    route_mode: 'fast', // not an OpenAI field: the gateway must cope
  });
  const choice = resp.choices[0];
  assert.match(choice.message.content, expectedReply(prompt));
  assert.equal(choice.finish_reason, 'stop');
  assert.equal(resp.model, env('TOLLWAY_MODEL')); // the catalog id, not the provider's name
  const u = resp.usage;
  assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0, JSON.stringify(u));
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
});

test('stream', async () => {
  const prompt = 'Stream these words back please';
  const stream = await client().chat.completions.create({
    model: env('TOLLWAY_MODEL'),
    messages: [{ role: 'user', content: prompt }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const pieces = [];
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.model, env('TOLLWAY_MODEL'));
    usage = chunk.usage ?? usage;
    for (const choice of chunk.choices) {
      if (choice.delta.content) pieces.push(choice.delta.content);
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.ok(pieces.length > 1, `expected several content chunks, got ${JSON.stringify(pieces)}`);
  assert.match(pieces.join(''), expectedReply(prompt));
  assert.equal(finish, 'stop');
  assert.ok(usage?.completion_tokens > 0, `usage ${JSON.stringify(usage)}`);
});

test('tool loop', async () => {
  const c = client();
  const model = env('TOLLWAY_MODEL');
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const first = await c.chat.completions.create({ model, messages, tools: [weatherTool] });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  const call = choice.message.tool_calls?.[0];
  assert.ok(call, JSON.stringify(choice.message));
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });

  // The documented loop: echo the assistant message, answer each call.
  messages.push(choice.message, { role: 'tool', tool_call_id: call.id, content: toolResult });
  const second = await c.chat.completions.create({ model, messages, tools: [weatherTool] });
  assert.equal(second.choices[0].finish_reason, 'stop');
  assert.ok(second.choices[0].message.content.includes(toolResult), second.choices[0].message.content);
});

test('tool loop, streamed', async () => {
  const c = client();
  const model = env('TOLLWAY_MODEL');
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const calls = [];
  let finish = null;
  const stream = await c.chat.completions.create({ model, messages, tools: [weatherTool], stream: true });
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      finish = choice.finish_reason ?? finish;
      for (const tc of choice.delta.tool_calls ?? []) {
        // Fragments of one call share an index; id and name come first.
        const acc = (calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        acc.id ||= tc.id ?? '';
        acc.function.name ||= tc.function?.name ?? '';
        acc.function.arguments += tc.function?.arguments ?? '';
      }
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1, JSON.stringify(calls));
  assert.ok(calls[0].id);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'Paris' });

  messages.push(
    { role: 'assistant', content: null, tool_calls: calls },
    { role: 'tool', tool_call_id: calls[0].id, content: toolResult },
  );
  let text = '';
  const second = await c.chat.completions.create({ model, messages, tools: [weatherTool], stream: true });
  for await (const chunk of second) {
    for (const choice of chunk.choices) text += choice.delta.content ?? '';
  }
  assert.ok(text.includes(toolResult), text);
});

test('bad key is 401 invalid_api_key', async () => {
  const bogus = client('ale-bogus0000000000000000000000000000');
  await assert.rejects(
    bogus.chat.completions.create({ model: env('TOLLWAY_MODEL'), messages: [{ role: 'user', content: 'hi' }] }),
    (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err}`);
      assertGatewayError(err, 401);
      assert.equal(err.code, 'invalid_api_key');
      return true;
    },
  );
});

test('unknown model is 400', async () => {
  await assert.rejects(
    client().chat.completions.create({
      model: 'tollway-test-no-such-model',
      messages: [{ role: 'user', content: 'hi' }],
      user: 'sdk-node',
      route_mode: 'fast',
    }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
      assertGatewayError(err, 400);
      return true;
    },
  );
});

test('models list', async () => {
  // The catalog is readable with the SDK; entries carry the spec's fields beyond OpenAI's.
  const ids = [];
  for await (const m of client().models.list()) {
    ids.push(m.id);
    if (m.id === env('TOLLWAY_MODEL')) {
      for (const f of ['name', 'pricing', 'is_ready', 'is_free', 'input_modalities']) {
        assert.ok(f in m, `catalog entry lacks ${f}`);
      }
      assert.equal(m.is_ready, true);
    }
  }
  assert.ok(ids.includes(env('TOLLWAY_MODEL')), `catalog ${ids} lacks ${env('TOLLWAY_MODEL')}`);
});

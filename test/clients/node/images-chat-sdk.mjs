// Tollway's I3 image models through chat completions (spec 4.1 rule 5), with the official
// OpenAI Node SDK: the generated images come back as image_url content parts (data URLs).
//
// The Go end-to-end suite (TestGeminiImageChatSDKs) runs `node --test images-chat-sdk.mjs` with:
//   TOLLWAY_BASE_URL      gateway base URL, e.g. http://127.0.0.1:PORT/v1
//   TOLLWAY_API_KEY       a valid gateway key (ale-...)
//   TOLLWAY_MODEL         a family I3 model id (flash-2.5)
//   TOLLWAY_IMAGE_SHA256  SHA-256 of the image the fake draws for "a red fox in snow"
//   TOLLWAY_INPUT_IMAGE   a small PNG in base64, to send as an input image
// (Its name keeps it out of the chat suite's `node --test`.)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { env, gatewayClient } from './gateway.mjs';

const client = gatewayClient();
const model = env('TOLLWAY_MODEL');

function images(message) {
  assert.ok(Array.isArray(message.content), 'content is an array of parts');
  return message.content
    .filter((p) => p.type === 'image_url')
    .map((p) => {
      assert.match(p.image_url.url, /^data:image\/png;base64,/);
      return Buffer.from(p.image_url.url.split(',')[1], 'base64');
    });
}

test('a text prompt gets an image part', async () => {
  const resp = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a red fox in snow' }] });
  assert.equal(resp.model, model);
  assert.equal(resp.choices[0].finish_reason, 'stop');
  const got = images(resp.choices[0].message);
  assert.equal(got.length, 1);
  assert.equal(createHash('sha256').update(got[0]).digest('hex'), env('TOLLWAY_IMAGE_SHA256'));
  const texts = resp.choices[0].message.content.filter((p) => p.type === 'text').map((p) => p.text);
  assert.deepEqual(texts, ['Here is your image: a red fox in snow']);
  assert.equal(resp.usage.prompt_tokens, 5);
  assert.equal(resp.usage.completion_tokens, 9 + 1290); // the text's and the image's
  assert.equal(resp.usage.completion_tokens_details.image_tokens, 1290); // billed per image
});

test('an input image as an image_url part', async () => {
  const url = `data:image/png;base64,${env('TOLLWAY_INPUT_IMAGE')}`;
  const resp = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'add a hat' }, { type: 'image_url', image_url: { url } }] }],
  });
  assert.equal(images(resp.choices[0].message).length, 1);
  assert.equal(resp.usage.prompt_tokens, 3 + 258);
});

test('stream is refused with the fix', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a fox' }], stream: true }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /send stream false/);
    return true;
  });
});

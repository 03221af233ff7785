// Tollway's video tasks through the official OpenAI Node SDK (videos.create/retrieve).
//
// The Go end-to-end suite (TestOpenAINodeSDKVideos) runs `node --test videos-sdk.mjs` with:
//   TOLLWAY_BASE_URL  gateway base URL, e.g. http://127.0.0.1:PORT/v1
//   TOLLWAY_API_KEY   a valid gateway key (ale-...)
//   TOLLWAY_MODEL     a family V1 video model id
//   TOLLWAY_V2_MODEL  a family V2 text-to-video model id
// (Its name keeps it out of the chat suite's `node --test`.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { env, gatewayClient } from './gateway.mjs';

const client = gatewayClient();
const model = env('TOLLWAY_MODEL');
const v2Model = env('TOLLWAY_V2_MODEL');

// untilDone retrieves video every second until it is completed or failed (30 s at most).
async function untilDone(video) {
  const deadline = Date.now() + 30000;
  while (!['completed', 'failed'].includes(video.status) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 1000));
    video = await client.videos.retrieve(video.id);
  }
  return video;
}

test('videos.create then videos.retrieve until completed', async () => {
  let video = await client.videos.create({ model, prompt: 'a red fox in snow', duration: 6, resolution: '1080P' });
  assert.match(video.id, /^video_/);
  assert.equal(video.object, 'video');
  assert.equal(video.status, 'queued');
  video = await untilDone(video);
  assert.equal(video.status, 'completed');
  assert.equal(video.cost, '0.32');
  assert.match(video.result.videos[0].url, /^http/);
});

test('refusals are SDK errors', async () => {
  await assert.rejects(client.videos.create({ model, prompt: 'x', duration: 10, resolution: '1080P' }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /1080P takes 6 s/);
    return true;
  });
  await assert.rejects(client.videos.retrieve('video_DOESNOTEXIST0000000000000'), (e) => e.status === 404);
});

test('V2 takes the prompt videos.create requires', async () => {
  let video = await client.videos.create({ model: v2Model, prompt: 'a red fox in snow', parameters: { duration: 8 } });
  assert.equal(video.status, 'queued');
  video = await untilDone(video);
  assert.equal(video.status, 'completed');
  assert.equal(video.seconds, '8');
  await assert.rejects(client.videos.create({ model: v2Model, prompt: 'a fox', input: { prompt: 'a cat' } }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /differ/);
    return true;
  });
});

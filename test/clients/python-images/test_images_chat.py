"""Tollway's I3 image models through chat completions (spec 4.1 rule 5), with the official
OpenAI Python SDK: the generated images come back as image_url content parts (data URLs).

The Go end-to-end suite (TestGeminiImageChatSDKs) runs this file with:
  TOLLWAY_BASE_URL      gateway base URL, e.g. http://127.0.0.1:PORT/v1
  TOLLWAY_API_KEY       a valid gateway key (ale-...)
  TOLLWAY_MODEL         a family I3 model id (flash-2.5)
  TOLLWAY_IMAGE_SHA256  SHA-256 of the image the fake draws for "a red fox in snow"
  TOLLWAY_INPUT_IMAGE   a small PNG in base64, to send as an input image
"""

import base64
import hashlib
import os

import openai
import pytest

client = openai.OpenAI(base_url=os.environ["TOLLWAY_BASE_URL"], api_key=os.environ["TOLLWAY_API_KEY"], max_retries=0)
MODEL = os.environ["TOLLWAY_MODEL"]


def parts(message):
    """The message's content parts as dicts (the SDK keeps a list it has no type for as is)."""
    assert isinstance(message.content, list), message.content
    return [p if isinstance(p, dict) else p.model_dump() for p in message.content]


def images(message):
    out = []
    for p in parts(message):
        if p["type"] == "image_url":
            url = p["image_url"]["url"]
            assert url.startswith("data:image/png;base64,"), url[:40]
            out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


def test_text_prompt_gets_an_image():
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a red fox in snow"}])
    assert resp.model == MODEL
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "stop"
    got = images(msg)
    assert len(got) == 1
    assert got[0][:8] == b"\x89PNG\r\n\x1a\n"
    assert hashlib.sha256(got[0]).hexdigest() == os.environ["TOLLWAY_IMAGE_SHA256"]
    texts = [p["text"] for p in parts(msg) if p["type"] == "text"]
    assert texts == ["Here is your image: a red fox in snow"]
    # Completion tokens are every output token (the text's 9 words, as the fake counts them, and
    # the image's 1,290); image_tokens says which were the image (billed per image).
    assert resp.usage.prompt_tokens == 5 and resp.usage.completion_tokens == 9 + 1290
    assert resp.usage.model_dump()["completion_tokens_details"]["image_tokens"] == 1290


def test_input_image_as_image_url():
    data = "data:image/png;base64," + os.environ["TOLLWAY_INPUT_IMAGE"]
    resp = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": "add a hat"}, {"type": "image_url", "image_url": {"url": data}}]}],
    )
    assert len(images(resp.choices[0].message)) == 1
    assert resp.usage.prompt_tokens == 3 + 258  # the fake bills an input image 258 tokens


def test_stream_is_refused_with_the_fix():
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a fox"}], stream=True)
    assert "send stream false" in str(e.value)

"""Tollway's POST /v1/embeddings with the official OpenAI Python SDK, unmodified.

The Go end-to-end suite (TestEmbeddingsSDKs) runs this file with:
  TOLLWAY_BASE_URL      gateway base URL, e.g. http://127.0.0.1:PORT/v1
  TOLLWAY_API_KEY       a valid gateway key (ale-...)
  TOLLWAY_MODEL         an embeddings model on an OpenAI-compatible provider
  TOLLWAY_GEMINI_MODEL  an embeddings model on Gemini (the gateway encodes base64 itself)
  TOLLWAY_EXPECTED      JSON: "<input>|<dimensions>" -> base64 of the float32s the fake draws
The SDK asks for base64 by default and decodes it: the decoded vector must equal the fake's
float32s bit for bit.
"""

import base64
import json
import os
import struct

import openai

client = openai.OpenAI(base_url=os.environ["TOLLWAY_BASE_URL"], api_key=os.environ["TOLLWAY_API_KEY"], max_retries=0)
MODEL = os.environ["TOLLWAY_MODEL"]
EXPECTED = json.loads(os.environ["TOLLWAY_EXPECTED"])


def expected(text, dims=0):
    raw = base64.b64decode(EXPECTED[f"{text}|{dims}"])
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def as_float32(values):
    """The values as float32s: a float answer's JSON numbers are float32s printed shortest."""
    return struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))


def test_default_is_base64_decoded_by_the_sdk():
    resp = client.embeddings.create(model=MODEL, input="hello from the SDK")
    assert resp.model == MODEL
    assert resp.object == "list"
    assert len(resp.data) == 1 and resp.data[0].index == 0
    assert tuple(resp.data[0].embedding) == expected("hello from the SDK")
    assert resp.usage.prompt_tokens == 4 and resp.usage.total_tokens == 4


def test_float_list_with_dimensions():
    resp = client.embeddings.create(model=MODEL, input=["hello from the SDK", "second input"], dimensions=12, encoding_format="float")
    assert [d.index for d in resp.data] == [0, 1]
    assert as_float32(resp.data[0].embedding) == expected("hello from the SDK", 12)
    assert as_float32(resp.data[1].embedding) == expected("second input", 12)


def test_explicit_base64_is_left_to_the_caller():
    resp = client.embeddings.create(model=MODEL, input="second input", encoding_format="base64")
    raw = base64.b64decode(resp.data[0].embedding)
    assert struct.unpack(f"<{len(raw) // 4}f", raw) == expected("second input")


def test_gemini_answer_encoded_by_the_gateway():
    resp = client.embeddings.create(model=os.environ["TOLLWAY_GEMINI_MODEL"], input="hello from the SDK", dimensions=12)
    assert tuple(resp.data[0].embedding) == expected("hello from the SDK", 12)
    assert resp.usage.prompt_tokens > 0

"""Tollway through the official OpenAI Python SDK.

The Go end-to-end suite starts Tollway in front of the fake upstream and runs
this file with:
  TOLLWAY_BASE_URL        gateway base URL, e.g. http://127.0.0.1:PORT/v1
  TOLLWAY_API_KEY         a valid gateway key (ale-...)
  TOLLWAY_MODEL           a catalog model id routed to the fake upstream
  TOLLWAY_UPSTREAM_MODEL  the upstream model name the fake echoes back
"""

import json
import os
import re

import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TOOL_RESULT = "22C and sunny"


def env(name):
    # A missing variable fails: a skipped suite would look green in CI.
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set; these tests run against a live Tollway, see this file's docstring",
            pytrace=False,
        )
    return value


def client(api_key=None):
    return openai.OpenAI(
        base_url=env("TOLLWAY_BASE_URL"),
        api_key=api_key or env("TOLLWAY_API_KEY"),
        max_retries=0,  # retries would hide the gateway's first answer
        timeout=30,
    )


def expected_reply(prompt):
    # The fake upstream answers "Hello from <name>/<upstream model>: <prompt>",
    # so the model part proves the gateway rewrote the catalog id.
    return re.compile(rf"Hello from .+/{re.escape(env('TOLLWAY_UPSTREAM_MODEL'))}: {re.escape(prompt)}")


def assert_gateway_error(err, status):
    assert err.status_code == status
    assert isinstance(err.body, dict), err.body
    assert err.body.get("message"), err.body
    assert err.code, err.body
    request_id = err.response.headers.get("x-request-id")
    assert request_id, "no x-request-id header"
    assert err.body.get("request_id") == request_id
    assert err.request_id == request_id


def test_plain_completion():
    prompt = "Say hello to Tollway"
    resp = client().chat.completions.create(
        model=env("TOLLWAY_MODEL"),
        messages=[{"role": "user", "content": prompt}],
        user="sdk-python",
        extra_body={"route_mode": "fast"},  # not an OpenAI field: the gateway must cope
    )
    choice = resp.choices[0]
    assert expected_reply(prompt).fullmatch(choice.message.content), choice.message.content
    assert f"/{env('TOLLWAY_UPSTREAM_MODEL')}: " in choice.message.content
    assert choice.finish_reason == "stop"
    assert resp.model == env("TOLLWAY_MODEL"), resp.model  # the catalog id, not the provider's name
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_stream():
    prompt = "Stream these words back please"
    stream = client().chat.completions.create(
        model=env("TOLLWAY_MODEL"),
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        assert chunk.model == env("TOLLWAY_MODEL"), chunk.model
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    text = "".join(pieces)
    assert len(pieces) > 1, f"expected several content chunks, got {pieces}"
    assert expected_reply(prompt).fullmatch(text), text
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


def test_tool_loop():
    c, model = client(), env("TOLLWAY_MODEL")
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls, choice.message
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # The documented loop: echo the assistant message, answer each call.
    messages.append(choice.message)
    messages.append({"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT})
    second = c.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert TOOL_RESULT in second.choices[0].message.content


def test_tool_loop_streamed():
    c, model = client(), env("TOLLWAY_MODEL")
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    calls, finish = {}, None
    for chunk in c.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], stream=True):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                # Fragments of one call share an index; id and name come first.
                acc = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                acc["id"] = tc.id or acc["id"]
                if tc.function:
                    acc["name"] = tc.function.name or acc["name"]
                    acc["arguments"] += tc.function.arguments or ""
    assert finish == "tool_calls"
    assert list(calls) == [0], calls
    call = calls[0]
    assert call["id"] and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"}

    messages.append({
        "role": "assistant",
        "content": None,
        "tool_calls": [{
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]},
        }],
    })
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT})
    text = ""
    for chunk in c.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
    assert TOOL_RESULT in text


def test_bad_key():
    bogus = client(api_key="ale-bogus0000000000000000000000000000")
    with pytest.raises(openai.AuthenticationError) as info:
        bogus.chat.completions.create(
            model=env("TOLLWAY_MODEL"), messages=[{"role": "user", "content": "hi"}]
        )
    assert_gateway_error(info.value, 401)
    assert info.value.code == "invalid_api_key"


def test_unknown_model():
    with pytest.raises(openai.BadRequestError) as info:
        client().chat.completions.create(
            model="tollway-test-no-such-model",
            messages=[{"role": "user", "content": "hi"}],
            user="sdk-python",
            extra_body={"route_mode": "fast"},
        )
    assert_gateway_error(info.value, 400)


def test_models_list():
    # The catalog is readable with the SDK; entries carry the spec's fields beyond OpenAI's.
    models = {m.id: m for m in client().models.list()}
    model = models[env("TOLLWAY_MODEL")]
    extra = model.model_dump()
    for field in ("name", "pricing", "is_ready", "is_free", "input_modalities", "supported_sampling_parameters"):
        assert field in extra, field
    assert extra["is_ready"] is True
    assert client().models.retrieve(env("TOLLWAY_MODEL")).id == env("TOLLWAY_MODEL")

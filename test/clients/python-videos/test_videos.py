"""Tollway's video tasks through the official OpenAI Python SDK (videos.create/retrieve).

The Go end-to-end suite (TestOpenAIPythonSDKVideos) runs this file with:
  TOLLWAY_BASE_URL  gateway base URL, e.g. http://127.0.0.1:PORT/v1
  TOLLWAY_API_KEY   a valid gateway key (ale-...)
  TOLLWAY_MODEL     a family V1 video model id
  TOLLWAY_V2_MODEL  a family V2 text-to-video model id
"""

import os
import time

import openai
import pytest

client = openai.OpenAI(base_url=os.environ["TOLLWAY_BASE_URL"], api_key=os.environ["TOLLWAY_API_KEY"], max_retries=0)
MODEL = os.environ["TOLLWAY_MODEL"]
V2_MODEL = os.environ["TOLLWAY_V2_MODEL"]


def test_create_and_retrieve_until_completed():
    video = client.videos.create(
        model=MODEL, prompt="a red fox in snow [Pan left]", extra_body={"duration": 6, "resolution": "1080P"}
    )
    assert video.id.startswith("video_")
    assert video.object == "video"
    assert video.status == "queued"
    assert video.model == MODEL
    deadline = time.monotonic() + 30
    while video.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(1)
        video = client.videos.retrieve(video.id)
    assert video.status == "completed", video
    assert video.progress == 100
    assert video.completed_at is not None and video.expires_at is not None
    extra = video.model_extra
    assert extra["cost"] == "0.32"
    assert extra["result"]["videos"][0]["url"].startswith("http")
    assert extra["provider"] == "hailuo"


def test_refusals_are_sdk_errors():
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(model=MODEL, prompt="x", extra_body={"duration": 10, "resolution": "1080P"})
    assert "1080P takes 6 s" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve("video_DOESNOTEXIST0000000000000")


def test_v2_takes_the_sdk_prompt():
    # videos.create requires prompt and sends it at the top level; V2 reads it as input.prompt.
    video = client.videos.create(model=V2_MODEL, prompt="a red fox in snow", extra_body={"parameters": {"duration": 8}})
    assert video.status == "queued"
    deadline = time.monotonic() + 30
    while video.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(1)
        video = client.videos.retrieve(video.id)
    assert video.status == "completed", video
    assert video.seconds == "8"
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(model=V2_MODEL, prompt="a fox", extra_body={"input": {"prompt": "a cat"}})
    assert "differ" in str(e.value)

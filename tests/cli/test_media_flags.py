"""``anna serve``'s media flags become the server's media policy and processor defaults."""

from __future__ import annotations

import click
import pytest
from anna_cli.media_options import media_settings


def test_flags_reach_the_policy(tmp_path):
    fetcher, kwargs = media_settings(allowed_media_domains=("media.example.com,cdn.example.com", "x.test"),
                                     allow_private_media=True, allowed_local_media_path=tmp_path,
                                     mm_processor_kwargs='{"max_pixels": 1048576}', other_flag=3)
    policy = fetcher.policy
    assert policy.allowed_media_domains == ("media.example.com", "cdn.example.com", "x.test")
    assert policy.allow_private_media is True and policy.allowed_local_media_path == tmp_path
    assert kwargs == {"max_pixels": 1048576}


def test_defaults_refuse_private_and_local_media():
    fetcher, kwargs = media_settings()
    assert fetcher.policy.allowed_media_domains == () and not fetcher.policy.allow_private_media
    assert fetcher.policy.allowed_local_media_path is None and kwargs == {}


@pytest.mark.parametrize(("raw", "needle"), [("{not json", "not JSON"), ("[1, 2]", "JSON object")])
def test_mm_processor_kwargs_must_be_a_json_object(raw, needle):
    with pytest.raises(click.BadParameter, match=needle) as err:
        media_settings(mm_processor_kwargs=raw)
    assert err.value.param_hint == "--mm-processor-kwargs"

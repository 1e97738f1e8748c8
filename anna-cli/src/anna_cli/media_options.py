"""``anna serve``'s media flags: which media URLs the server fetches (:class:`anna_core.media.MediaPolicy`) and
the default settings of the model's media processor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

MEDIA_OPTION_NAMES = ("allowed_media_domains", "allow_private_media", "allowed_local_media_path",
                      "mm_processor_kwargs")


def media_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--allowed-media-domains``, ``--allow-private-media``, ``--allowed-local-media-path``,
    ``--mm-processor-kwargs``."""
    decorators = [
        click.option("--allowed-media-domains", "allowed_media_domains", multiple=True, metavar="HOST[,HOST...]",
                     help="Fetch image and video URLs from these hosts only (they may resolve to private addresses: your own "
                          "media server). Default: any public host. Repeatable."),
        click.option("--allow-private-media", is_flag=True, default=False,
                     help="Also fetch image and video URLs that resolve to loopback, private, link-local or other non-public "
                          "addresses (trusted networks only)."),
        click.option("--allowed-local-media-path", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="Serve file:// media URLs and local paths under this folder (symlinks resolved; nothing "
                          "outside it). Default: local files are refused."),
        click.option("--mm-processor-kwargs", default=None, metavar="JSON",
                     help='Default settings of the model\'s media processor, e.g. \'{"max_pixels": 1048576}\' '
                          "(Qwen3.5: min_pixels, max_pixels, fps, max_frames); a request's mm_processor_kwargs override them."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def media_settings(**options: Any) -> tuple[Any, dict[str, Any]]:
    """``(MediaFetcher, default mm_processor_kwargs)`` of :func:`media_options`' flags (other keys ignored).

    Raises:
        click.BadParameter: ``--mm-processor-kwargs`` is not a JSON object.
    """
    from anna_core.media import MediaFetcher, MediaPolicy

    domains = tuple(h for value in options.get("allowed_media_domains") or () for h in value.split(",") if h.strip())
    policy = MediaPolicy(allowed_media_domains=domains, allow_private_media=bool(options.get("allow_private_media")),
                         allowed_local_media_path=options.get("allowed_local_media_path"))
    raw = options.get("mm_processor_kwargs")
    kwargs: Any = {}
    if raw:
        try:
            kwargs = json.loads(raw)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--mm-processor-kwargs") from None
        if not isinstance(kwargs, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--mm-processor-kwargs")
    return MediaFetcher(policy), kwargs

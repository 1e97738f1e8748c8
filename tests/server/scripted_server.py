"""One in-process HTTP server per test session: the real app, engine and Qwen3.5 vocabulary over
a scripted fake model (:mod:`anna_core.testing.scripted`), on a free loopback port."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

API_KEY = "sk-test-anna"
MODEL = "scripted-qwen35"
MAX_MODEL_LEN = 2048


class ScriptedServer:
    """Handles: ``base_url``, the fake ``model`` (add scripts with ``script``), ``state``,
    ``tokenizer``; ``client()`` gives an official ``openai.OpenAI`` client with the API key.

    By default the Qwen3.5 vocabulary in ``tokenizer_dir`` with Qwen's parsers; another vocabulary
    comes as ``tokenizer`` (an :class:`anna_core.tokenizer.Tokenizer`) with its ``vocab_size`` (logits
    width), ``eos_token_ids`` (the first ends each script) and parsers.
    """

    def __init__(self, tokenizer_dir: Path | None = None, *, tokenizer: Any = None, vocab_size: int | None = None,
                 eos_token_ids: list[int] | None = None, reasoning_parser: Any = None,
                 tool_call_parser: Any = None, family: str = "qwen35"):
        import uvicorn
        from anna_core.engine.async_engine import AsyncEngine
        from anna_core.engine.config import EngineConfig
        from anna_core.engine.llm_engine import LLMEngine
        from anna_core.parsers.qwen3_coder import Qwen3CoderToolParser
        from anna_core.parsers.think import ThinkReasoningParser
        from anna_core.server.app import create_app
        from anna_core.server.state import ServerState
        from anna_core.testing.qwen_vocab import QWEN35_VOCAB_SIZE
        from anna_core.testing.scripted import ScriptedLM
        from anna_core.tokenizer import Tokenizer

        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_pretrained(tokenizer_dir)
        eos_ids = list(eos_token_ids or [self.tokenizer.eos_token_id])
        self.eos = eos_ids[0]
        self.model = ScriptedLM(self.tokenizer, vocab_size or QWEN35_VOCAB_SIZE, self.eos)
        config = EngineConfig(max_num_seqs=8, max_model_len=MAX_MODEL_LEN, enable_prefix_caching=False,
                              prompt_cache_size=0, num_blocks=1024)
        self.llm = LLMEngine(self.model, tokenizer=self.tokenizer, config=config, eos_token_ids=eos_ids,
                             model_max_len=MAX_MODEL_LEN)
        self.engine = AsyncEngine(self.llm)
        self.engine.start()
        self.state = ServerState(model_name=MODEL, reasoning_parser=reasoning_parser or ThinkReasoningParser,
                                 tool_call_parser=tool_call_parser or Qwen3CoderToolParser, api_key=API_KEY)
        self.state.set_ready(self.engine, self.tokenizer, max_model_len=self.llm.max_model_len,
                             eos_token_ids=eos_ids, info={"family": family, "device": "cpu"})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(create_app(self.state), host="127.0.0.1", port=port, log_config=None,
                                lifespan="on", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="scripted-uvicorn", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the scripted server did not start")
            time.sleep(0.02)

    def script(self, name: str, text: str | None = None, *, ids: list[int] | None = None) -> str:
        """Register a token script from ``text`` (encoded with the real tokenizer) or ``ids``;
        returns the marker to put in a prompt."""
        from anna_core.testing.scripted import TokenScript

        ids = list(ids) if ids is not None else self.tokenizer.encode(text)
        self.model.add(name, TokenScript(tuple(ids)))
        return f"[[script:{name}]]"

    def uniform(self, name: str, candidates: list[int], length: int) -> str:
        from anna_core.testing.scripted import UniformScript

        self.model.add(name, UniformScript(tuple(candidates), length))
        return f"[[script:{name}]]"

    def client(self, api_key: str = API_KEY) -> Any:
        import openai

        return openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=api_key, max_retries=0, timeout=60)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        asyncio.run(self.engine.shutdown(drain=False))

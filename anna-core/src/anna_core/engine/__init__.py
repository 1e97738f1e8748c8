"""The engine: scheduler, cache manager, model runner, sampler, detokenizer and step loop."""

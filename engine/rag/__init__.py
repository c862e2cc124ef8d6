"""Model providers (embedding, generation, rerank), prompts and citation checks (RAG-1 … RAG-3).

Providers are configured in config.toml under [rag]; API keys are referenced by the
*name* of an environment variable and never stored, logged or echoed.
"""

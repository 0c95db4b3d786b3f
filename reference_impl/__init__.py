"""A reference OpenAI-compatible serving stack carrying hot paths H1-H6 in two forms each.

Processes: ``server`` (HTTP + tokenizer manager), ``scheduler`` (continuous batching + engine),
``detokenizer``; ``launcher`` starts them. Messages between them live in ``messages``.
"""

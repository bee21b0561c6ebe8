"""ProxAI: a proxy that lets a client of one LLM API protocol use a provider of another.

Protocols: openai_chat_completions, openai_responses, anthropic_messages and gemini_generate_content,
each as a client and as a provider.
"""

__version__ = "0.1.0"

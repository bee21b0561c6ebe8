"""Endpoints beside the translated calls: models, token counting, Gemini paths, stored Responses, conversations, compaction and background runs."""

"""Wire protocols: OpenAI chat completions, OpenAI Responses and Anthropic Messages."""

"""Real text around the model: paragraphs split into sentences and joined back, HTML taken apart and put
back together around translated text, the language of a text detected (issue 22)."""

"""What one request to an exported model may hold (no TensorFlow here: flags and clients read it too).

A text signature refuses a request whose text field holds more characters, all the batch's texts together, than
the export's limit (`serving.checked_text`; the manifest's `max_request_chars`). The memory a request takes grows
linearly with its text (the encoder runs its windows a slice at a time, `serving.in_slices`), so the limit bounds
what one request can cost a server: docs/serving.md gives the measured peak memory per size.
"""

# The default limit, characters per field per request: a 500,000-character context or document (about 80,000
# words) is answered; a larger one is refused with a message naming the field and the limit.
MAX_REQUEST_CHARS = 500_000


def check_max_request_chars(value: int, flag: str = "--max_request_chars") -> int:
  """`value` when it is a positive int, else ValueError naming `flag`."""
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    raise ValueError(f"{flag}={value!r}: give a positive number of characters (default {MAX_REQUEST_CHARS:,})")
  return value

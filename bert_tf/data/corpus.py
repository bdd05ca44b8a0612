"""The embedded default corpus: the Python documentation topics that ship with every CPython.

`pydoc_data.topics.topics` holds 79 documents (about 65,000 words) of real English prose and code. We turn it
into the pretraining input format: one sentence per line, a blank line between documents. Nothing is
downloaded, so the main job and the tests run on any machine with Python.
"""

from __future__ import annotations

import re

# A sentence ends at . ! or ? (optionally closed by a quote or bracket) followed by whitespace and the start of
# the next sentence. Abbreviations such as "e.g. the" stay joined because the next word is lower-case.
_SENTENCE_END = re.compile(r"""(?<=[.!?])["')\]]?\s+(?=["'(\[]?[A-Z0-9])""")
_UNDERLINE = re.compile(r"^\s*([*=\-~^\"#+])\1{2,}\s*$")


def split_sentences(paragraph: str) -> list[str]:
  """Splits one paragraph of prose into sentences."""
  text = " ".join(paragraph.split())
  return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def document_sentences(text: str) -> list[str]:
  """One documentation topic -> its sentences, in order.

  Prose paragraphs (separated by blank lines) are joined and split into sentences; indented blocks (code,
  grammar) keep one line per sentence, since their line breaks are meaningful; heading underlines are dropped.
  """
  sentences: list[str] = []
  prose: list[str] = []

  def flush_prose():
    if prose:
      sentences.extend(split_sentences(" ".join(prose)))
      prose.clear()

  for line in text.splitlines():
    if not line.strip() or _UNDERLINE.match(line):
      flush_prose()
    elif line.startswith((" ", "\t")) and not prose:
      sentences.append(line.strip())
    else:
      prose.append(line.strip())
  flush_prose()
  return sentences


def default_corpus_documents() -> list[list[str]]:
  """The embedded corpus as documents of sentences, in `pydoc_data.topics` key order (deterministic)."""
  from pydoc_data.topics import topics

  documents = [document_sentences(topics[name]) for name in sorted(topics)]
  return [doc for doc in documents if doc]


def default_corpus_text() -> str:
  """The embedded corpus in the pretraining input format: a sentence a line, blank line between documents."""
  return "\n\n".join("\n".join(doc) for doc in default_corpus_documents()) + "\n"


def write_default_corpus(path: str) -> str:
  """Writes `default_corpus_text()` to `path` (local or gs://) atomically; returns `path`."""
  from bert_tf import fileio

  fileio.write_text_atomic(path, default_corpus_text())
  return path


# The main job's fine-tuning task: which of these documents a sentence comes from. Four large documents on
# distinct subjects (string methods, the pdb debugger, format strings, dict-like mappings), ~1,500 sentences.
DOCUMENT_TASK_TOPICS = ("string-methods", "debugger", "formatstrings", "typesmapping")


def document_classification_split(topics: tuple[str, ...] = DOCUMENT_TASK_TOPICS, dev_every: int = 5
                                  ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
  """A small real classification task from the embedded corpus: (sentence, topic) pairs of the documents
  `topics`, split into train and held-out dev by position (every `dev_every`-th sentence of a document is dev),
  so both splits cover each document from beginning to end. Sentences of fewer than 4 words (headings, code
  fragments) are left out; duplicates keep their first occurrence only, so no sentence is in both splits."""
  from pydoc_data.topics import topics as all_topics

  unknown = [t for t in topics if t not in all_topics]
  if unknown:
    raise ValueError(f"unknown pydoc topics {unknown}; choose among pydoc_data.topics.topics")
  train, dev, seen = [], [], set()
  for topic in topics:
    kept = [s for s in document_sentences(all_topics[topic]) if len(s.split()) >= 4]
    for i, sentence in enumerate(kept):
      if sentence in seen:
        continue
      seen.add(sentence)
      (dev if i % dev_every == dev_every - 1 else train).append((sentence, topic))
  return train, dev

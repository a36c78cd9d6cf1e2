"""Words: the one definition of how a line of text splits into words (Python and TensorFlow).

A word is a maximal run of characters that are not whitespace, and whitespace
is every character for which Python's `str.isspace()` is true (`WHITESPACE`):
ASCII space, tab, newline, vertical tab, form feed and carriage return, the
information separators U+001C-U+001F, NEXT LINE (U+0085), NO-BREAK SPACE
(U+00A0), the other Unicode space separators (U+1680, U+2000-U+200A, U+202F,
U+205F, U+3000) and the line and paragraph separators (U+2028, U+2029).
`split` is `str.split()` without arguments.

TensorFlow's `tf.strings.split` splits at ASCII whitespace only, and RE2's
`\\s` is ASCII too, so `split_tf` first maps every character of `WHITESPACE`
to a space (`normalize_whitespace`). Both give the same words for every
string (tests/data/test_words.py checks every character).

Words are compared byte for byte: nothing in tfeff normalizes Unicode, so a word
written in NFC (`café` with U+00E9) and in NFD (`e` + U+0301) is two words
(`Vocabulary.build` warns when a text holds both). BERT's uncased basic tokenizer
(`lower_case`) is the exception: it decomposes words and strips their accents.

Every site that splits text uses these: the vocabulary count
(`Vocabulary.build`), the training and held-out pipelines (`line_dataset`,
`lines_to_windows`), the masked-LM tokenizers (BERT's basic tokenizer, which
itself splits at ASCII whitespace, sees normalized text), the text fastText
trains on (`train_fasttext` writes the words joined by single spaces) and the
exported embedders.
"""

import tensorflow as tf

# Python's `str.isspace()` characters, i.e. `[chr(c) for c in range(0x110000) if chr(c).isspace()]`.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
              "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
              "\u2028\u2029\u202f\u205f\u3000")
# RE2 character classes (code points written as \x{...}).
_OTHER_WHITESPACE = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE if c != " ") + "]"
_BLANK = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]*"


def split(line):
    """The words of a str `line` (a list of str)."""
    return line.split()


def normalize_whitespace(text):
    """A `tf.string` tensor with every `WHITESPACE` character replaced by a space
    (bytes that are not valid UTF-8 are left as they are)."""
    return tf.strings.regex_replace(text, _OTHER_WHITESPACE, " ")


def split_tf(lines):
    """Ragged `[batch, words]` words of a 1-D `tf.string` tensor: `split` in TensorFlow."""
    return tf.strings.split(normalize_whitespace(lines))


def is_blank_tf(lines):
    """Whether each line of a `tf.string` tensor holds no word (bool, same shape)."""
    return tf.strings.regex_full_match(lines, _BLANK)

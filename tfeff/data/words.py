"""Words: the one definition of how a line of text splits into words (Python and TensorFlow).

A word is a maximal run of characters that are not whitespace, and whitespace is
every character for which `str.isspace()` is true (`WHITESPACE`, Unicode spaces
included): `split` is `str.split()`. `split_tf` first maps every `WHITESPACE`
character to a space (`tf.strings.split` knows ASCII whitespace only); both give the
same words for every string. Every site that splits text uses these.
"""

import tensorflow as tf

# `[chr(c) for c in range(0x110000) if chr(c).isspace()]`
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
    """`text` (`tf.string`) with every `WHITESPACE` character replaced by a space."""
    return tf.strings.regex_replace(text, _OTHER_WHITESPACE, " ")


def split_tf(lines):
    """Ragged `[batch, words]` words of a 1-D `tf.string` tensor: `split` in TensorFlow."""
    return tf.strings.split(normalize_whitespace(lines))


def is_blank_tf(lines):
    """Whether each line of a `tf.string` tensor holds no word (bool, same shape)."""
    return tf.strings.regex_full_match(lines, _BLANK)

"""The counter-based integer hashes behind tfeff's seeded draws, on every backend.

Both are pinned by saved models: `hash32` (ALONE's filters, `tfeff.layers.AloneEmbedding`)
and `hash_uniform` through `lowbias32` (C. Wellons; CoRe's anchor draws). Arithmetic is
modulo 2**32, in int64 masked to 32 bits on PyTorch (whose Keras uint32 is int64).
"""

import keras
import numpy as np
from keras import ops

_MASK32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**27, so every product of `_fold_mix32` stays inside int64
_HASH_START = 0x243F6A88


def _fold_mix32(x, xp, dtype):
    """A bijection of [0, 2**32) with good avalanche (int64 values, or uint32 wrapping)."""
    mix, mask, shift = (xp.array(v, dtype) for v in (_MIX, _MASK32, 16))
    for _ in range(2):
        x = xp.bitwise_xor(xp.right_shift(x, shift), x)
        x = xp.bitwise_and(xp.multiply(x, mix), mask)
    return xp.bitwise_xor(xp.right_shift(x, shift), x)


def hash32(*words, xp=np, dtype="int64"):
    """`h(w_1, ..., w_n)`: fold `h <- mix32(h XOR (w_i mod 2**32))` from 0x243F6A88, of
    Python ints or broadcasting arrays of `dtype`, "int64" (products stay below 2**59) or
    "uint32" (products wrap), in `xp` (`numpy` or `keras.ops`)."""
    mask = xp.array(_MASK32, dtype)
    h = xp.array(_HASH_START, dtype)
    for w in words:
        if isinstance(w, (int, np.integer)):
            w = xp.array(int(w) & _MASK32, dtype)
        h = _fold_mix32(xp.bitwise_xor(h, xp.bitwise_and(w, mask)), xp, dtype)
    return h


def high_product32(h, c, xp=np, dtype="int64"):
    """`(h * c) >> 32` of h in [0, 2**32) and a Python int c in (0, 2**31)."""
    if dtype == "int64":
        return xp.right_shift(xp.multiply(h, xp.array(c, dtype)), xp.array(32, dtype))
    # uint32: 16-bit limbs; every partial product and sum stays below 2**32.
    low, shift = xp.array(0xFFFF, dtype), xp.array(16, dtype)
    hh, hl = xp.right_shift(h, shift), xp.bitwise_and(h, low)
    ch, cl = xp.array(c >> 16, dtype), xp.array(c & 0xFFFF, dtype)
    lo, m1, m2 = xp.multiply(hl, cl), xp.multiply(hh, cl), xp.multiply(hl, ch)
    carry = xp.right_shift(xp.add(xp.add(xp.bitwise_and(m1, low), xp.bitwise_and(m2, low)),
                                  xp.right_shift(lo, shift)), shift)
    return xp.add(xp.add(xp.multiply(hh, ch), xp.right_shift(m1, shift)),
                  xp.add(xp.right_shift(m2, shift), carry))


def _u32(value):
    return ops.convert_to_tensor(value, "uint32")


def _wrap32(x):
    """`x mod 2**32`: a no-op on uint32; on PyTorch, where Keras' uint32 is int64."""
    return ops.bitwise_and(x, _u32(_MASK32))


def _multiply32(x, constant):
    """`x * constant mod 2**32` of x in [0, 2**32) and a Python int constant < 2**32:
    exact in int64 too (Keras' uint32 on PyTorch), the constant split into 16-bit halves
    so that no intermediate value reaches 2**49."""
    low = ops.multiply(x, _u32(constant & 0xFFFF))
    high = ops.bitwise_and(ops.multiply(x, _u32(constant >> 16)), _u32(0xFFFF))
    return _wrap32(ops.add(low, ops.left_shift(high, _u32(16))))


def lowbias32(x):
    """A 32-bit integer hash ('lowbias32', C. Wellons) of `x` in [0, 2**32)."""
    x = ops.bitwise_xor(x, ops.right_shift(x, 16))
    x = _multiply32(x, 0x7FEB352D)
    x = ops.bitwise_xor(x, ops.right_shift(x, 15))
    x = _multiply32(x, 0x846CA68B)
    return ops.bitwise_xor(x, ops.right_shift(x, 16))


def hash_uniform(index, seed):
    """Uniform [0, 1) float32 noise, one value per integer `index`, keyed by `seed`.

    Integer ops only, so eager, `tf.function`, XLA, a SavedModel, JAX and PyTorch give
    bit-identical numbers (TensorFlow's stateless random ops draw others under XLA).

    Args:
        index: non-negative int tensor; each entry gets its own value.
        seed: two ints (or an int tensor of shape `(2,)`), taken modulo 2**32.

    Returns:
        float32 tensor shaped like `index`, multiples of 2**-24.
    """
    if isinstance(seed, (tuple, list)) and all(isinstance(v, (int, np.integer)) for v in seed):
        # Reduced here: a 64-bit constant does not exist on JAX without x64.
        seed = ops.convert_to_tensor(np.array([int(v) % 2**32 for v in seed], np.uint32))
    elif keras.backend.standardize_dtype(seed.dtype) not in ("uint32", "int32"):
        seed = ops.mod(ops.cast(seed, "int64"), 2**32)
    seed = _wrap32(ops.cast(seed, "uint32"))
    key = lowbias32(ops.bitwise_xor(lowbias32(seed[0]), seed[1]))
    x = lowbias32(ops.bitwise_xor(_wrap32(ops.cast(index, "uint32")), key))
    x = lowbias32(_wrap32(ops.add(x, key)))
    return ops.cast(ops.right_shift(x, 8), "float32") / float(2**24)

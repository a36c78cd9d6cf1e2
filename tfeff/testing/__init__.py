"""What the tests and the benchmarks share to check tfeff's numbers; never imported by tfeff.

* `numerics`: tolerances derived from the computation (`rounding_bound`, `assert_close`,
  `UNIT_ROUNDOFF`) and `keras_x64`, in which a Keras backend computes float64 as float64.
* `lstm_reference`, `masked_bi_lstm_reference`: NumPy float64 references of the LSTM
  cells and of `MaskedBiLSTM`, with the roundings along their longest paths.
* `torch_lstm_parity`: `MaskedBiLSTM`'s PyTorch LSTM path (cuDNN on CUDA) against its
  portable path, a program: `python -m tfeff.testing.torch_lstm_parity --device cuda`.
  The tests run it on the CPU, the GPU suite (`benchmarks/gpu_suite.py`) on the device.

Importing this package imports nothing; its modules import NumPy and Keras, never
TensorFlow, so they run on a machine without it. It sits above every room of the package
(`.importlinter`): it may import the layers it checks, and no module of tfeff imports it.
"""

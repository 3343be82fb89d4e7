"""lamb_tf: LAMB and LARS (arXiv 1904.00962) as Keras optimizers, for both Keras flavours."""

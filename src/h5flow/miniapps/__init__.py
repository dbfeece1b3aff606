"""Miniapps: small simulations that produce in-transit data (numpy ports of SENSEI's miniapps).

* :mod:`h5flow.miniapps.oscillator` — SENSEI's ``oscillator``: a sum of Gaussian-weighted oscillators
  sampled on a regularly decomposed 3-D grid, with optional advected particles.
"""

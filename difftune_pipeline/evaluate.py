"""Error metrics against measured throughputs (ARCHITECTURE §7)."""

from __future__ import annotations

import numpy as np
from scipy.stats import kendalltau


def mape(predicted, measured) -> float:
    """Mean absolute percentage error, as a fraction (0.25 = 25%)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if p.size == 0:
        return float("nan")
    return float(np.mean(np.abs(p - m) / m))


def kendall_tau(predicted, measured) -> float:
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if p.size < 2:
        return float("nan")
    return float(kendalltau(p, m).statistic)

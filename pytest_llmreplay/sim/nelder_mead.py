"""Nelder-Mead in the unit cube, with restarts (what ``calibrate --from-run`` searches with).

Nelder & Mead 1965, with the standard reflection 1, expansion 2, contraction 1/2 and shrink 1/2;
points are clamped into the cube. When the simplex's values differ by less than
:data:`TOLERANCE` it restarts around its best point (a collapsed simplex is the method's known
failure in narrow valleys), until the budget is spent or a restart finds nothing better.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

START_STEP = 0.15  # of each parameter's range: the first simplex's size
TOLERANCE = 1e-6


def nelder_mead(
    function: Callable[[np.ndarray], float], start: np.ndarray, max_evals: int
) -> tuple[np.ndarray, float, int]:
    """Minimise ``function`` over the unit cube (points clamped into it) from ``start``, restarting
    around the best point while that helps (module doc); returns (best point, its value,
    evaluations)."""
    best, score, evals = _simplex_search(function, np.clip(start, 0, 1), max_evals)
    while evals < max_evals:
        point, again, used = _simplex_search(function, best, max_evals - evals)
        evals += used
        if again >= score - TOLERANCE:
            break
        best, score = point, again
    return best, score, evals


def _simplex_search(
    function: Callable[[np.ndarray], float], start: np.ndarray, max_evals: int
) -> tuple[np.ndarray, float, int]:
    """One Nelder-Mead run until the losses converge or ``max_evals``."""
    evals = 0

    def value(point: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        return function(point)

    dims = len(start)
    simplex = [start]
    for i in range(dims):
        vertex = simplex[0].copy()
        vertex[i] = vertex[i] + START_STEP if vertex[i] + START_STEP <= 1 else vertex[i] - START_STEP
        simplex.append(vertex)
    scores = [value(p) for p in simplex]
    while evals < max_evals:
        order = np.argsort(scores)
        simplex, scores = [simplex[i] for i in order], [scores[i] for i in order]
        if scores[-1] - scores[0] < TOLERANCE:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = np.clip(centroid + (centroid - simplex[-1]), 0, 1)
        r_score = value(reflected)
        if r_score < scores[0]:
            expanded = np.clip(centroid + 2 * (centroid - simplex[-1]), 0, 1)
            e_score = value(expanded)
            simplex[-1], scores[-1] = (expanded, e_score) if e_score < r_score else (reflected, r_score)
        elif r_score < scores[-2]:
            simplex[-1], scores[-1] = reflected, r_score
        else:
            contracted = np.clip(centroid + 0.5 * (simplex[-1] - centroid), 0, 1)
            c_score = value(contracted)
            if c_score < scores[-1]:
                simplex[-1], scores[-1] = contracted, c_score
            else:
                for i in range(1, len(simplex)):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    scores[i] = value(simplex[i])
    best = int(np.argmin(scores))
    return simplex[best], scores[best], evals


__all__ = ["nelder_mead", "START_STEP", "TOLERANCE"]

"""Source of :mod:`hierbandit.stats._arm_sums_unrolled`: :func:`~hierbandit.stats.arm_likelihood.
arm_sums` written out for each small d, every matrix entry a local scalar.

With d fixed, one cell's d×d algebra is straight-line code without loops or scratch arrays, and
the compiler vectorises the loop over cells itself (the sums as reductions, reassociated). On
K = 5, d = 3, N = 10,000 this took 17 ns per cell against 43 ns for the generic blocked kernel
(docs/decisions/bayes.md, B18). The module is generated once and committed, so that numba's
on-disk cache keeps its compiled code; ``tests/stats/test_arm_likelihood.py`` checks that the
committed file is what :func:`render` produces and that every variant equals the generic kernel.

Regenerate with ``python -m hierbandit.stats._arm_codegen hierbandit/stats/_arm_sums_unrolled.py``
and ``ruff format`` it.
"""

from __future__ import annotations

#: the largest d with an unrolled variant; above it the generic blocked kernel runs
UNROLLED_MAX = 4

#: cells whose determinants are multiplied up before one logarithm
_DET_BLOCK = 64


def _pair(a: int, c: int) -> int:
    """Index of the entry (a, c) of a symmetric matrix in its lower triangle, row by row."""
    if a < c:
        a, c = c, a
    return a * (a + 1) // 2 + c


def _function(d: int) -> list[str]:
    """The lines of ``arm_sums_{d}``."""
    npr = d * (d + 1) // 2
    o_P, o_r = 1, 1 + npr
    o_Rr = o_r + d
    o_Ar = o_Rr + npr
    o_AA = o_Ar + npr * d
    n_sums = o_AA + npr * (npr + 1) // 2
    lines = [
        "@njit(**_JIT)",
        f"def arm_sums_{d}(D, L, s2, tot):  # pragma: no cover - compiled",
        f'    """:func:`~hierbandit.stats.arm_likelihood.arm_sums` for d = {d}: the totals into'
        f' ``tot`` ({n_sums},), Σ_j log|B_j| returned."""',
        "    N = D.shape[1]",
        "    inv = 1.0 / s2",
    ]
    add = lines.append
    for i in range(d):
        for j in range(i + 1):
            add(f"    l{i}{j} = L[{i}, {j}]")
            add(f"    m{i}{j} = L[{i}, {j}] * inv")
    for s in range(n_sums):
        add(f"    acc{s} = 0.0")
    add(f"    det = np.empty({_DET_BLOCK})")
    add("    logdet = 0.0")
    add("    prod = 1.0")
    add(f"    for j0 in range(0, N, {_DET_BLOCK}):")
    add(f"        nb = min({_DET_BLOCK}, N - j0)")
    add("        for t in range(nb):")
    ind = "            "
    add(f"{ind}j = j0 + t")
    for a in range(d):
        for c in range(a + 1):
            add(f"{ind}g{a}{c} = D[{_pair(a, c)}, j]")
    g = {(a, c): f"g{max(a, c)}{min(a, c)}" for a in range(d) for c in range(d)}
    for a in range(d):
        add(f"{ind}b{a} = D[{npr + a}, j]")
    add(f"{ind}q = D[{npr + d}, j]")
    # U = LᵀG and u = Lᵀb (L lower: L[a, i] ≠ 0 only for a ≥ i)
    for i in range(d):
        for c in range(d):
            add(f"{ind}u{i}_{c} = " + " + ".join(f"l{a}{i} * {g[a, c]}" for a in range(i, d)))
        add(f"{ind}v{i} = " + " + ".join(f"l{a}{i} * b{a}" for a in range(i, d)))
    # B = I + U L / σ² and its Cholesky factor C
    for i in range(d):
        for k in range(i + 1):
            expr = " + ".join(f"u{i}_{c} * m{c}{k}" for c in range(k, d))
            expr = ("1.0 + " if i == k else "") + expr
            expr += "".join(f" - c{i}{m} * c{k}{m}" for m in range(k))
            if i == k:
                add(f"{ind}c{i}{i} = np.sqrt({expr})")
                add(f"{ind}i{i} = 1.0 / c{i}{i}")
            else:
                add(f"{ind}c{i}{k} = ({expr}) * i{k}")
    add(f"{ind}det[t] = " + " * ".join(f"c{i}{i} * c{i}{i}" for i in range(d)))
    # W = C⁻¹U, w = C⁻¹u
    for c in range(d):
        for i in range(d):
            expr = f"u{i}_{c}" + "".join(f" - c{i}{m} * w{m}_{c}" for m in range(i))
            add(f"{ind}w{i}_{c} = ({expr}) * i{i}")
    for i in range(d):
        expr = f"v{i}" + "".join(f" - c{i}{m} * x{m}" for m in range(i))
        add(f"{ind}x{i} = ({expr}) * i{i}")
    # A = (G − WᵀW/σ²)/σ², r = (b − Wᵀw/σ²)/σ², yᵀV⁻¹y = (q − wᵀw/σ²)/σ²
    for a in range(d):
        for c in range(a + 1):
            ww = " + ".join(f"w{i}_{a} * w{i}_{c}" for i in range(d))
            add(f"{ind}a{_pair(a, c)} = ({g[a, c]} - ({ww}) * inv) * inv")
        rw = " + ".join(f"w{i}_{a} * x{i}" for i in range(d))
        add(f"{ind}r{a} = (b{a} - ({rw}) * inv) * inv")
    xx = " + ".join(f"x{i} * x{i}" for i in range(d))
    add(f"{ind}acc0 += (q - ({xx}) * inv) * inv")
    for p in range(npr):
        add(f"{ind}acc{o_P + p} += a{p}")
    for a in range(d):
        add(f"{ind}acc{o_r + a} += r{a}")
        for c in range(a + 1):
            add(f"{ind}acc{o_Rr + _pair(a, c)} += r{a} * r{c}")
    for p in range(npr):
        for e in range(d):
            add(f"{ind}acc{o_Ar + p * d + e} += a{p} * r{e}")
        for p2 in range(p + 1):
            add(f"{ind}acc{o_AA + p * (p + 1) // 2 + p2} += a{p} * a{p2}")
    # log|B| = Σ log det, multiplied up and logged rarely (det ≥ 1)
    add("        for t in range(nb):")
    add("            dt = det[t]")
    add("            if 1.0 <= dt <= 1e150:")
    add("                prod *= dt")
    add("                if prod > 1e150:")
    add("                    logdet += np.log(prod)")
    add("                    prod = 1.0")
    add("            else:  # huge, not finite, or rounding below 1")
    add("                logdet += np.log(dt)")
    for s in range(n_sums):
        add(f"    tot[{s}] = acc{s}")
    add("    return logdet + np.log(prod)")
    return lines


def _draws_pass1(d: int) -> list[str]:
    """The lines of ``draws_blocks_{d}``: the per-cell blocks of the exact conditional draws
    (:func:`hierbandit.stats.kernels.conditional_draws_soa`, the same formulas: S_j =
    LrᵀG_jLr + σ²I = R_jR_jᵀ, W_j = Lr R_j⁻ᵀ, C̃_j = W_jW_jᵀ, M_j⁻¹ = W_jR_j⁻¹Lr⁻¹), with the
    sums P += M_j⁻ᵀG_j and r += M_j⁻ᵀb_j."""
    npr = d * (d + 1) // 2
    lines = [
        "@njit(**_JIT)",
        f"def draws_blocks_{d}(D, Lr, Li, s2, P, r, CM):  # pragma: no cover - compiled",
        f'    """The cells\' blocks of the conditional draws for d = {d}: C̃_j (lower triangle)'
        " and M_j⁻¹ (row by row) into ``CM`` (d(d+1)/2 + d², N), M_j⁻ᵀG_j and M_j⁻ᵀb_j added"
        ' to ``P`` and ``r``; False if some S_j is not numerically positive definite."""',
        "    N = D.shape[1]",
    ]
    add = lines.append
    for i in range(d):
        for k in range(i + 1):
            add(f"    l{i}{k} = Lr[{i}, {k}]")
            add(f"    n{i}{k} = Li[{i}, {k}]")
    for i in range(d):
        add(f"    r{i} = 0.0")
        for k in range(d):
            add(f"    p{i}{k} = 0.0")
    add("    ok = True")
    add("    for j in range(N):")
    ind = "        "
    g = {(a, c): f"g{max(a, c)}{min(a, c)}" for a in range(d) for c in range(d)}
    for a in range(d):
        for c in range(a + 1):
            add(f"{ind}g{a}{c} = D[{_pair(a, c)}, j]")
    for a in range(d):
        add(f"{ind}b{a} = D[{npr + a}, j]")
    # Wg = G Lr, K = Lrᵀ Wg (lower) + σ²I, R = chol(K)
    for i in range(d):
        for k in range(i + 1):  # only the rows m ≥ k of G Lr enter Lrᵀ(G Lr)'s lower triangle
            add(f"{ind}e{i}_{k} = " + " + ".join(f"{g[i, m]} * l{m}{k}" for m in range(k, d)))
    for i in range(d):
        for k in range(i + 1):
            expr = " + ".join(f"l{m}{i} * e{m}_{k}" for m in range(i, d))
            if i == k:
                expr += " + s2"
            expr += "".join(f" - c{i}{m} * c{k}{m}" for m in range(k))
            if i == k:
                add(f"{ind}t{i} = {expr}")
                add(f"{ind}ok &= t{i} > 0.0")
                add(f"{ind}c{i}{i} = np.sqrt(t{i})")
                add(f"{ind}h{i} = 1.0 / c{i}{i}")
            else:
                add(f"{ind}c{i}{k} = ({expr}) * h{k}")
    # W = Lr R⁻ᵀ (full), C̃ = W Wᵀ
    for i in range(d):
        for k in range(d):
            lik = f"l{i}{k}" if k <= i else "0.0"
            expr = lik + "".join(f" - c{k}{m} * w{i}_{m}" for m in range(k))
            add(f"{ind}w{i}_{k} = ({expr}) * h{k}")
    for i in range(d):
        for k in range(i + 1):
            add(
                f"{ind}CM[{_pair(i, k)}, j] = "
                + " + ".join(f"w{i}_{m} * w{k}_{m}" for m in range(d))
            )
    # Kv = R⁻¹ Lr⁻¹ (lower), M⁻¹ = W Kv
    for i in range(d):
        for k in range(i + 1):
            expr = f"n{i}{k}" + "".join(f" - c{i}{m} * v{m}_{k}" for m in range(k, i))
            add(f"{ind}v{i}_{k} = ({expr}) * h{i}")
    for i in range(d):
        for k in range(d):
            add(f"{ind}x{i}_{k} = " + " + ".join(f"w{i}_{m} * v{m}_{k}" for m in range(k, d)))
            add(f"{ind}CM[{npr + i * d + k}, j] = x{i}_{k}")
    for i in range(d):
        add(f"{ind}r{i} += " + " + ".join(f"x{m}_{i} * b{m}" for m in range(d)))
        for k in range(d):
            add(f"{ind}p{i}{k} += " + " + ".join(f"x{m}_{i} * {g[m, k]}" for m in range(d)))
    for i in range(d):
        add(f"    r[{i}] += r{i}")
        for k in range(d):
            add(f"    P[{i}, {k}] += p{i}{k}")
    add("    return ok")
    return lines


def _draws_pass2(d: int) -> list[str]:
    """The lines of ``draws_cells_{d}``: β_j = A_jβ₀ + C̃_jb_j + chol(σ²C̃_j) z_j with
    A_j = σ²M_j⁻¹, from the blocks of ``draws_blocks_{d}``."""
    npr = d * (d + 1) // 2
    lines = [
        "@njit(**_JIT)",
        f"def draws_cells_{d}(D, CM, s2, b0, Z, out, bad):  # pragma: no cover - compiled",
        f'    """The instances\' draws for d = {d} into ``out`` (N, d) from the variates ``Z``'
        " (N, d); ``bad[j]`` marks an instance whose σ²C̃_j did not factorise (its draw is"
        ' left to the caller)."""',
        "    N = D.shape[1]",
    ]
    add = lines.append
    for i in range(d):
        add(f"    a{i} = b0[{i}]")
    add("    for j in range(N):")
    ind = "        "
    for a in range(d):
        add(f"{ind}b{a} = D[{npr + a}, j]")
    ct = {(a, c): f"ct{max(a, c)}{min(a, c)}" for a in range(d) for c in range(d)}
    for a in range(d):
        for c in range(a + 1):
            add(f"{ind}ct{a}{c} = CM[{_pair(a, c)}, j]")
    for i in range(d):
        expr = " + ".join(
            f"s2 * CM[{npr + i * d + m}, j] * a{m} + {ct[i, m]} * b{m}" for m in range(d)
        )
        add(f"{ind}u{i} = {expr}")
    # chol(σ²C̃)
    add(f"{ind}fail = False")
    for i in range(d):
        for k in range(i + 1):
            expr = f"s2 * {ct[i, k]}" + "".join(f" - f{i}{m} * f{k}{m}" for m in range(k))
            if i == k:
                add(f"{ind}y{i} = {expr}")
                add(f"{ind}fail |= not y{i} > 0.0")
                add(f"{ind}f{i}{i} = np.sqrt(y{i}) if y{i} > 0.0 else 1.0")
            else:
                add(f"{ind}f{i}{k} = ({expr}) / f{k}{k}")
    add(f"{ind}bad[j] = fail")
    for i in range(d):
        add(
            f"{ind}out[j, {i}] = u{i} + " + " + ".join(f"f{i}{m} * Z[j, {m}]" for m in range(i + 1))
        )
    return lines


def render(dmax: int = UNROLLED_MAX) -> str:
    """The module's source for d = 1..``dmax``."""
    out = [
        '"""Generated by :mod:`hierbandit.stats._arm_codegen` (do not edit): one arm\'s sums',
        "over its cells and the exact conditional draws of its instances for each small d,",
        "every matrix entry a local scalar.",
        '"""',
        "",
        "import numpy as np",
        "from numba import njit",
        "",
        "# the reduction over cells is reassociated so that it vectorises; no other fast-math flag",
        '_JIT = {"cache": True, "nogil": True, "error_model": "numpy",'
        ' "fastmath": {"reassoc", "contract", "nsz"}}',
        "",
    ]
    for d in range(1, dmax + 1):
        out += ["", *_function(d), ""]
    for d in range(1, dmax + 1):
        out += ["", *_draws_pass1(d), "", "", *_draws_pass2(d), ""]
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys
    from pathlib import Path

    Path(sys.argv[1]).write_text(render())

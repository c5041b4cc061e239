"""Writes notebooks/01_estimators.ipynb (outputs cleared). Run: .venv/bin/python notebooks/build_01_estimators.py"""
from notebook_builder import NotebookBuilder

NB = NotebookBuilder()
md, code = NB.md, NB.code


md(r"""
# max@k and pass@k estimators in `maxk_jax`

What each estimator of `maxk_jax.estimators` computes, checked against brute force over all
k-subsets on small examples; the weights $w_{ij}$ of the max@k transforms; and how max@k grows
with $k$ for a few reward distributions. Runs on CPU in well under a minute.

**Colab:** set `REPO_URL` at the top of the first code cell to the repository's address and run all cells:
that cell clones the repository (unless the notebook already runs inside a checkout) and pip-installs the
checkout. Locally (`./setup.sh`) it installs nothing.
""")

NB.colab_install()


code(r"""
import itertools
import math

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from maxk_jax import estimators as est

print("jax", jax.__version__, "| estimators:", ", ".join(est.list_estimators()))
""")

md(r"""
## 1. Metrics

With $n$ sampled completions of a prompt and rewards $r_1,\dots,r_n$ (fraction of tests passed),
the unbiased estimators average over all $\binom{n}{k}$ subsets $I$ of size $k$:

$$\text{pass@}k = \binom{n}{k}^{-1}\sum_{|I|=k} \mathbb 1\big[\exists i\in I: r_i = 1\big]
 = 1-\frac{\binom{n-c}{k}}{\binom{n}{k}},\qquad
\text{max@}k = \binom{n}{k}^{-1}\sum_{|I|=k}\max_{i\in I} r_i
 = \binom{n}{k}^{-1}\sum_{j=k}^{n}\binom{j-1}{k-1} r_{(j)}$$

($c$ = number of correct samples, $r_{(1)}\le\dots\le r_{(n)}$ sorted). The library never forms
$\binom{n}{k}$ in floating point (log-space ratios), so it stays exact for large $n$.
""")

code(r"""
def subsets(n, k):
    return list(itertools.combinations(range(n), k))

rewards = np.array([0.2, 0.5, 0.5, 1.0, 0.0, 0.7, 0.5, 1.0])  # n = 8, ties on purpose
correct = rewards == 1.0
n = len(rewards)
print(" k | pass@k (lib) | brute force | max@k (lib) | brute force")
for k in range(1, n + 1):
    brute_pass = np.mean([correct[list(I)].any() for I in subsets(n, k)])
    brute_max = np.mean([rewards[list(I)].max() for I in subsets(n, k)])
    lib_pass, lib_max = float(est.pass_at_k(correct, k)), float(est.max_at_k(rewards, k))
    assert abs(lib_pass - brute_pass) < 1e-6 and abs(lib_max - brute_max) < 1e-6
    print(f"{k:2d} | {lib_pass:12.6f} | {brute_pass:11.6f} | {lib_max:11.6f} | {brute_max:11.6f}")
""")

md(r"""
## 2. Advantage estimators

Every registered estimator has one signature,
`get_estimator(name, **options)(rewards, *, k, log_ratio=None, mask=None, answer_ids=None)`,
and returns the coefficient $c_i$ of $\nabla_\theta\log\pi_\theta(y_i)$ (or the PPO advantage)
for each of the $n$ samples, in input order. Below, sums over $I$ run over the $k$-subsets of
the $n$ samples that contain $i$, and $\rho_l = \pi_\theta(y_l)/\pi_{\text{old}}(y_l)
= e^{\text{log\_ratio}_l}$, $\delta_l=\rho_l-1$.

| name | coefficient $c_i$ | source |
|---|---|---|
| `maxk:baseline=none` | $\tilde r_i=\binom{n}{k}^{-1}\sum_{I\ni i}\max r_I$ | max@k paper eq. 7–9 (Listing 2) |
| `maxk_offpolicy:baseline=none` | $\binom{n}{k}^{-1}\sum_{I\ni i}\big(1+\sum_{l\in I}\delta_l\big)\max r_I$ | §3.3, first order (Listing 3, corrected) |
| `maxk_offpolicy_exact:baseline=none` | $\binom{n}{k}^{-1}\sum_{I\ni i}\big(\prod_{l\in I}\rho_l\big)\max r_I$ | eq. 10 (the library's DP is $O(nk)$) |
| `maxk` (default `baseline=zscore`) = `bon_mean` | z-score of $\tilde r$ | §3.2 / §4.3 "BoN mean" (the paper as it ran) |
| `maxk_offpolicy`, `maxk_offpolicy_exact` (defaults) | z-score of the row above with $\delta$ clamped to $[-1, 1]$ / $\rho$ to $[0, 2]$ (`clamp_delta=1.0`) | the paper's off-policy BoN (§3.1, Listing 3) |
| `maxk:baseline=loo1` = `bon_loo1` = `tang_loo` | $\binom{n}{k}^{-1}\sum_{I\ni i}\big(\max r_I-\max r_{I\setminus i}\big)$ | App. A BoN LOO-1; Tang et al. eq. 2 |
| `maxk_offpolicy:baseline=loo1`, `maxk_offpolicy_exact:baseline=loo1` | $\binom{n}{k}^{-1}\sum_{I\ni i} w_I\big(\max r_I-\max r_{I\setminus i}\big)$, $w_I = 1+\sum_I\delta$ or $\prod_I\rho$ | unbiased LOO baseline with the estimator's own weights |
| `tang_loo_biased` | $\binom{n}{k}^{-1}\sum_{I\ni i}\big(A^I_i-\tfrac1k\sum_{l\in I}A^I_l\big)$, $A^I_i=\max r_I-\max r_{I\setminus i}$ | Tang et al. eq. 3 |
| `tang_leave_p_out` | $\binom{n}{k}^{-1}\sum_{I\ni i}\binom{k-1}{p-1}^{-1}\sum_{s\subseteq I,\,|s|=p,\,s\ni i}(A^I_s-\bar A^I)$, $A^I_s=\max r_I-\max r_{I\setminus s}$ | Tang et al. App. B eq. 5 |
| `tang_softmax` | LOO advantage of $f(I)=\sum_{l\in I}p_l r_l$, $p=\mathrm{softmax}(\beta r_I)$ | Tang et al. App. B |
| `majority_vote` | LOO advantage of $f(I)=r(\mathrm{maj}(a_I))$ (ties: mean over tied answers) | Tang et al. §3.1 |
| `grpo` | $(r_i-\bar r)/(\mathrm{std}(r)+\epsilon)$ | max@k paper eq. 5 |
| `rloo` | $r_i-\frac1{n-1}\sum_{j\ne i}r_j$ | Ahmadian et al. |
| `bon_max_mean` / `bon_max_second` | $r_i-\bar r$ / $r_i-(\text{best reward below the max})$ on maximal samples, else 0 | App. A |
| `bon_mean` | z-score of $\tilde r$ | App. A |

The next cell implements every row of the table literally, by enumerating subsets, and compares
it with the library on one example with ties and random log-ratios.
""")

code(r"""
def mean_over_subsets(n, k, coef):
    # c_i = C(n,k)^-1 sum_{I containing i} coef(I)[position of i in I]
    out = np.zeros(n)
    for I in subsets(n, k):
        out[list(I)] += coef(I)
    return out / math.comb(n, k)

def loo(f):  # A_i^I = f(I) - f(I \ i) for every i in I
    return lambda I: np.array([f(I) - f(tuple(j for j in I if j != i)) for i in I])

def zscore(x, eps=1e-6):
    return (x - x.mean()) / (x.std() + eps)

r = np.array([0.2, 0.5, 0.5, 1.0, 0.0, 0.7, 0.5])
answers = np.array([3, 1, 1, 2, 0, 4, 1])          # reward is a function of the answer
lr = np.random.default_rng(0).normal(scale=0.2, size=r.shape)
rho, delta = np.exp(lr), np.expm1(lr)
n, k, p, beta = len(r), 4, 2, 2.0
mx = lambda I: r[list(I)].max()
softmax_f = lambda I: float(np.sum(np.exp(beta * r[list(I)]) / np.exp(beta * r[list(I)]).sum() * r[list(I)]))
def majority_f(I):
    ids, counts = np.unique(answers[list(I)], return_counts=True)
    top = ids[counts == counts.max()]
    return np.mean([r[answers == a][0] for a in top])
def leave_p_out(I):
    A = {s: mx(I) - mx(tuple(j for j in I if j not in s)) for s in itertools.combinations(I, p)}
    A_bar = np.mean(list(A.values()))
    return np.array([sum(A[s] - A_bar for s in A if i in s) for i in I]) / math.comb(k - 1, p - 1)
def weighted_loo(w):
    return lambda I: w(I) * loo(mx)(I)
r_tilde = mean_over_subsets(n, k, lambda I: np.full(k, mx(I)))
top = r == r.max()

brute = {
    "maxk:baseline=none": r_tilde,
    "maxk_offpolicy:baseline=none": mean_over_subsets(n, k, lambda I: np.full(k, (1 + delta[list(I)].sum()) * mx(I))),
    "maxk_offpolicy_exact:baseline=none": mean_over_subsets(n, k, lambda I: np.full(k, rho[list(I)].prod() * mx(I))),
    "maxk": zscore(r_tilde),
    "maxk_offpolicy": zscore(mean_over_subsets(n, k, lambda I: np.full(k, (1 + np.clip(delta[list(I)], -1, 1).sum()) * mx(I)))),
    "maxk_offpolicy_exact": zscore(mean_over_subsets(n, k, lambda I: np.full(k, np.clip(rho[list(I)], 0, 2).prod() * mx(I)))),
    "maxk:baseline=loo1": mean_over_subsets(n, k, loo(mx)),
    "bon_loo1": mean_over_subsets(n, k, loo(mx)),
    "tang_loo": mean_over_subsets(n, k, loo(mx)),
    "maxk_offpolicy:baseline=loo1": mean_over_subsets(n, k, weighted_loo(lambda I: 1 + delta[list(I)].sum())),
    "maxk_offpolicy_exact:baseline=loo1": mean_over_subsets(n, k, weighted_loo(lambda I: rho[list(I)].prod())),
    "tang_loo_biased": mean_over_subsets(n, k, lambda I: loo(mx)(I) - loo(mx)(I).mean()),
    "tang_leave_p_out:p=2": mean_over_subsets(n, k, leave_p_out),
    "tang_softmax:beta=2.0": mean_over_subsets(n, k, loo(softmax_f)),
    "majority_vote": mean_over_subsets(n, k, loo(majority_f)),
    "grpo": zscore(r),
    "rloo": r - (r.sum() - r) / (n - 1),
    "bon_max_mean": np.where(top, r - r.mean(), 0.0),
    "bon_max_second": np.where(top, r - r[~top].max(), 0.0),
    "bon_mean": zscore(r_tilde),
}

print(f"n = {n}, k = {k}: max |library - brute force| per estimator")
for spec, want in brute.items():
    name, *opts = spec.split(":")
    options = {key: (float(v) if "." in v else (int(v) if v.isdigit() else v))
               for key, v in (o.split("=") for o in opts)}
    fn = est.get_estimator(name, **options)
    got = np.asarray(fn(jnp.asarray(r, jnp.float32), k=k, log_ratio=jnp.asarray(lr, jnp.float32),
                        answer_ids=jnp.asarray(answers)))
    err = np.max(np.abs(got - want))
    print(f"  {spec:38s} {err:.1e}")
    assert err < 2e-5, (spec, got, want)
""")

md(r"""
## 3. The weights $w_{ij}$

With the rewards sorted ascending, the transforms are linear in the rewards,
$\tilde r_i = \sum_j w_{ij} r_j / \binom{n}{k}$ (eq. 8), where $w_{ij}$ counts the $k$-subsets
containing $i$ whose maximum is $j$:

$$w_{ii}=\binom{i-1}{k-1},\qquad w_{ij}=\binom{j-2}{k-2}\ (j>i),\qquad w_{ij}=0\ (j<i).$$

Off policy, to first order in $\delta$ (§3.3 / App. E):

$$w'_{ii}=\binom{i-1}{k-1}(1+\delta_i)+\binom{i-2}{k-2}\sum_{l<i}\delta_l,\qquad
w'_{ij}=\binom{j-2}{k-2}(1+\delta_i+\delta_j)+\binom{j-3}{k-3}\sum_{l<j,\,l\ne i}\delta_l\ (j>i).$$

The paper's Listing 3 does not compute these as printed (it adds the diagonal term to every row
and its batched matmul mixes prompts); `maxk_jax/benchmarks/paper_listings.py` has the corrected
version. Here the weight matrices are built from the formulas and checked against the
library's $O(n\log n)$ transforms.
""")

code(r"""
def comb0(a, b):
    return math.comb(a, b) if 0 <= b <= a else 0

def weights(n, k, delta=None):
    # W[i, j] = w_ij / C(n, k) (1-based formulas above; rows i receive credit, columns j are maxima)
    d = np.zeros(n) if delta is None else delta
    cum = np.cumsum(d) - d
    W = np.zeros((n, n))
    for i in range(1, n + 1):
        W[i - 1, i - 1] = comb0(i - 1, k - 1) * (1 + d[i - 1]) + comb0(i - 2, k - 2) * cum[i - 1]
        for j in range(i + 1, n + 1):
            W[i - 1, j - 1] = (comb0(j - 2, k - 2) * (1 + d[i - 1] + d[j - 1])
                               + comb0(j - 3, k - 3) * (cum[j - 1] - d[i - 1]))
    return W / math.comb(n, k)

n, k = 16, 4
rng = np.random.default_rng(1)
r_sorted = np.sort(rng.uniform(size=n))
lr = rng.normal(scale=0.3, size=n)
W_on, W_off = weights(n, k), weights(n, k, np.expm1(lr))
on = np.asarray(est.maxk_reward_transform(jnp.asarray(r_sorted), k))
off = np.asarray(est.maxk_reward_transform_offpolicy(jnp.asarray(r_sorted), jnp.asarray(lr), k))
print("on-policy  max |W r - library| =", np.abs(W_on @ r_sorted - on).max())
print("off-policy max |W' r - library| =", np.abs(W_off @ r_sorted - off).max())
assert np.allclose(W_on @ r_sorted, on, atol=1e-6) and np.allclose(W_off @ r_sorted, off, atol=1e-5)

fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
for ax, M, title in [(axes[0], W_on, f"on-policy $w_{{ij}}/\\binom{{n}}{{k}}$, n={n}, k={k}"),
                     (axes[1], W_off, "off-policy $w'_{ij}/\\binom{n}{k}$ (log-ratio std 0.3)"),
                     (axes[2], W_off - W_on, "off-policy correction $w'-w$")]:
    lim = np.abs(M).max()
    im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set(title=title, xlabel="j (subset maximum, sorted ascending)", ylabel="i (credited sample)")
    fig.colorbar(im, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()
""")

md(r"""
Every sample's credit $\tilde r_i$ is a weighted sum of the rewards of the samples *above* it:
the best sample gets $\binom{n-1}{k-1}/\binom{n}{k}=k/n$ of its own reward, and the lowest
$k-1$ samples can never be a subset maximum (their diagonal is zero). Off policy, the
first-order correction re-weights each entry by the importance deltas of the subsets behind it.

## 4. How max@k grows with k

For a reward distribution $F$ on $[0,1]$, $\text{max@}k = \mathbb E[\max(r_1..r_k)]
= \int_0^1 \big(1-F(x)^k\big)\,dx$. The dots are the library's unbiased estimate from $n=256$
samples; the lines the exact values. Distributions whose mass sits far below their best
outcomes (rare passes, partial credit skewed low) gain most from more samples: that gap between
max@1 and max@k is what inference-aware training tries to keep instead of collapsing it.
""")

code(r"""
dists = {
    "Bernoulli(0.1)  (binary pass/fail)": stats.bernoulli(0.1),
    "Beta(0.5, 0.5)  (mostly all-or-nothing)": stats.beta(0.5, 0.5),
    "Beta(2, 5)  (partial credit, skewed low)": stats.beta(2, 5),
    "Beta(5, 2)  (partial credit, skewed high)": stats.beta(5, 2),
}
ks = 2 ** np.arange(9)  # 1 .. 256
grid = np.linspace(0, 1, 20001)
samples = np.stack([d.rvs(size=256, random_state=i) for i, d in enumerate(dists.values())])
fig, ax = plt.subplots(figsize=(8, 4.5))
for (label, dist), row in zip(dists.items(), samples):
    cdf = dist.cdf(grid)
    exact = [np.trapezoid(1 - cdf ** k, grid) for k in ks]
    estimate = [float(est.max_at_k(jnp.asarray(row, jnp.float32), int(k))) for k in ks]
    line, = ax.plot(ks, exact, label=label)
    ax.plot(ks, estimate, "o", color=line.get_color(), ms=4)
ax.set(xscale="log", xlabel="k", ylabel="max@k", title="max@k vs k: exact (lines), estimate from n = 256 (dots)")
ax.set_xticks(ks, [str(k) for k in ks])
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()
""")

md(r"""
For the bandit version of Tang et al.'s Figure 1 with these estimators, run
`python -m experiments.bandit`; for their speed against the paper's listings,
`python -m experiments.bench_estimators`.
""")


def main() -> None:
    """Writes notebooks/01_estimators.ipynb with no outputs."""
    NB.write("01_estimators.ipynb")


if __name__ == "__main__":
    main()

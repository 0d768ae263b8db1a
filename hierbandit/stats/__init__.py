"""The statistics core: sufficient statistics and exact conjugate algebra shared by every algorithm."""

from .empirical_bayes import (
    EBOptions,
    EBResult,
    bickel_levina_threshold,
    empirical_bayes,
    estimate_Sigma,
    estimate_sigma2,
    ols_estimates,
    psd_project,
    scatter_covariance,
    threshold_covariance,
)
from .hierarchical import (
    HierarchicalPosterior,
    IncrementalHierarchicalPosterior,
    hierarchical_posterior,
    posterior_cross_covariances,
    posterior_given_hyper,
)
from .marginal import MLResult, collapsed_loglik, fit_type2_ml, marginal_loglik
from .ridge import OLSStats, RidgeStats, ols_solve
from .suffstats import SuffStats, suffstats

__all__ = [
    "EBOptions",
    "EBResult",
    "HierarchicalPosterior",
    "IncrementalHierarchicalPosterior",
    "MLResult",
    "OLSStats",
    "RidgeStats",
    "SuffStats",
    "bickel_levina_threshold",
    "collapsed_loglik",
    "empirical_bayes",
    "estimate_Sigma",
    "estimate_sigma2",
    "fit_type2_ml",
    "hierarchical_posterior",
    "marginal_loglik",
    "ols_estimates",
    "ols_solve",
    "posterior_cross_covariances",
    "posterior_given_hyper",
    "psd_project",
    "scatter_covariance",
    "suffstats",
    "threshold_covariance",
]

"""The statistics core: sufficient statistics and exact conjugate algebra shared by every algorithm."""

from hierbandit.stats.empirical_bayes import (
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
from hierbandit.stats.hierarchical import (
    HierarchicalPosterior,
    IncrementalHierarchicalPosterior,
    conditional_draws,
    hierarchical_posterior,
    posterior_cross_covariances,
    posterior_given_hyper,
)
from hierbandit.stats.logistic import (
    LaplaceApproximation,
    OnlineLogistic,
    laplace_approximation,
    literal_update,
    newton_update,
    penalized_map,
    predictive_click_probability,
)
from hierbandit.stats.marginal import MLResult, collapsed_loglik, fit_type2_ml, marginal_loglik
from hierbandit.stats.online_ml import OnlineMLResult, online_ml_step
from hierbandit.stats.ridge import OLSStats, RidgeStats, ols_solve
from hierbandit.stats.suffstats import SuffStats, suffstats

__all__ = [
    "EBOptions",
    "EBResult",
    "HierarchicalPosterior",
    "IncrementalHierarchicalPosterior",
    "LaplaceApproximation",
    "MLResult",
    "OLSStats",
    "OnlineLogistic",
    "OnlineMLResult",
    "RidgeStats",
    "SuffStats",
    "bickel_levina_threshold",
    "collapsed_loglik",
    "conditional_draws",
    "empirical_bayes",
    "estimate_Sigma",
    "estimate_sigma2",
    "fit_type2_ml",
    "hierarchical_posterior",
    "laplace_approximation",
    "literal_update",
    "marginal_loglik",
    "newton_update",
    "ols_estimates",
    "ols_solve",
    "online_ml_step",
    "penalized_map",
    "posterior_cross_covariances",
    "posterior_given_hyper",
    "predictive_click_probability",
    "psd_project",
    "scatter_covariance",
    "suffstats",
    "threshold_covariance",
]

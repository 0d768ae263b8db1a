"""The statistics core: sufficient statistics and exact conjugate algebra shared by every algorithm."""

from .cluster_stats import ClusterStats, confidence_F
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
from .logistic import (
    LaplaceApproximation,
    OnlineLogistic,
    laplace_approximation,
    literal_update,
    newton_update,
    penalized_map,
    predictive_click_probability,
)
from .marginal import MLResult, collapsed_loglik, fit_type2_ml, marginal_loglik
from .mixture_em import MixtureEMResult, fit_mixture_em
from .ridge import OLSStats, RidgeStats, ols_solve
from .suffstats import SuffStats, suffstats

__all__ = [
    "ClusterStats",
    "EBOptions",
    "EBResult",
    "HierarchicalPosterior",
    "IncrementalHierarchicalPosterior",
    "LaplaceApproximation",
    "MLResult",
    "MixtureEMResult",
    "OLSStats",
    "OnlineLogistic",
    "RidgeStats",
    "SuffStats",
    "bickel_levina_threshold",
    "collapsed_loglik",
    "confidence_F",
    "empirical_bayes",
    "estimate_Sigma",
    "estimate_sigma2",
    "fit_mixture_em",
    "fit_type2_ml",
    "hierarchical_posterior",
    "laplace_approximation",
    "literal_update",
    "marginal_loglik",
    "newton_update",
    "ols_estimates",
    "ols_solve",
    "penalized_map",
    "posterior_cross_covariances",
    "posterior_given_hyper",
    "predictive_click_probability",
    "psd_project",
    "scatter_covariance",
    "suffstats",
    "threshold_covariance",
]
